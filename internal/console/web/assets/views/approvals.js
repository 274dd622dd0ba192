// approvals.js is the queue of held requests: pending approvals sorted by
// expiry, each with what it would do, why it was held, the balance and
// budget it would draw on now, and the exact request it is bound to. It
// follows WatchIntents and refreshes when a HOLD arrives or an approval is
// approved, rejected, used, voided or runs out (WatchApprovals).
import { h, replace, dl, when, left, enumText, status } from '../dom.js';
import * as api from '../api.js';
import { format } from '../money.js';
import { usageBars } from './usage.js';

export function approvalsView(el) {
  const list = h('div', { id: 'approvals', class: 'stack' });
  const live = h('span', { id: 'live', class: 'badge' }, 'connecting…');
  replace(el,
    h('div', { class: 'titlebar' }, h('h1', {}, 'Approvals'), live),
    h('p', { class: 'hint' }, 'Requests your agents made that a mandate held for you. Approving one lets that exact request through once, re-checked against the mandate\u2019s live limits; a changed request is a new hold.'),
    list);

  let items = [];
  let timer = null;
  let closed = false;

  async function refresh() {
    if (closed) return;
    const res = await api.get('/v1/approvals' + api.q({ state: 'APPROVAL_STATE_PENDING', pageSize: 200 }));
    items = (res.approvals || []).slice().sort((a, b) => new Date(a.expireTime) - new Date(b.expireTime));
    render();
  }

  // schedule refreshes the list soon, at most once a second however fast
  // the stream reports changes (a flood of HOLDs must not spend the owner's
  // API quota, which approving and rejecting need).
  let lastRefresh = 0;
  function schedule() {
    if (timer) return;
    const wait = Math.max(150, lastRefresh + 1000 - Date.now());
    timer = setTimeout(() => {
      timer = null;
      lastRefresh = Date.now();
      refresh().catch(e => status('Could not refresh approvals: ' + e.message, 'error'));
    }, wait);
  }

  // render updates the list in place: a card that is still pending keeps
  // its element (and with it the note being typed and the focus); new ones
  // are inserted in expiry order and decided ones removed.
  const cards = new Map(); // approval id → card element
  const empty = h('p', { class: 'empty', id: 'no-approvals' }, 'Nothing is waiting for you.');
  function render() {
    const want = new Set(items.map(a => a.approvalId));
    for (const [id, el] of cards) {
      if (!want.has(id)) { el.remove(); cards.delete(id); }
    }
    if (!items.length) { replace(list, empty); return; }
    empty.remove();
    let prev = null;
    for (const a of items) {
      let el = cards.get(a.approvalId);
      if (!el) { el = card(a); cards.set(a.approvalId, el); }
      const at = prev ? prev.nextSibling : list.firstChild;
      if (at !== el) list.insertBefore(el, at);
      prev = el;
    }
  }

  function card(a) {
    const ctx = h('div', { class: 'live-context' }, h('p', { class: 'hint' }, 'Balance and budget load when this request is on screen.'));
    const noteEl = h('textarea', { rows: '2', 'data-approval-id': a.approvalId, id: 'note-' + a.approvalId, maxlength: '1000' });
    const err = h('p', { class: 'error', role: 'alert' });
    const act = (verb) => async () => {
      err.textContent = '';
      if (verb === 'reject' && !noteEl.value.trim()) { err.textContent = 'Say why you reject it.'; noteEl.focus(); return; }
      try {
        const body = verb === 'approve'
          ? { requestFingerprint: a.requestFingerprint, note: noteEl.value.trim() }
          : { note: noteEl.value.trim() };
        await api.post(`/v1/approvals/${api.seg(a.approvalId)}:${verb}`, body);
        status(verb === 'approve' ? `Approved ${a.approvalId}: the agent's identical request will pass once.` : `Rejected ${a.approvalId}.`, 'ok');
        await refresh();
      } catch (e) {
        err.textContent = e.message;
      }
    };
    const held = a.heldBy || {};
    return h('article', { class: 'card approval', 'data-approval-id': a.approvalId, 'aria-labelledby': 'h-' + a.approvalId },
      h('header', { class: 'row' },
        h('h2', { id: 'h-' + a.approvalId }, enumText(a.actionKind, 'ACTION_KIND_'), ' of ', h('span', { class: 'amount' }, format(a.amount, a.rail))),
        h('span', { class: 'time-left', 'data-expire': a.expireTime }, left(a.expireTime))),
      dl([
        ['Agent', h('a', { href: '#/agents/' + encodeURIComponent(a.agentId) }, a.agentId)],
        ['Rail account', a.railAccount],
        ['Rail', enumText(a.rail, 'RAIL_')],
        ['Subject', a.subject],
        ['Payee', a.payee],
        ['Held by', held.gate ? `${held.gate} (${held.reasonCode || 'hold'})` : '—'],
        ['Reason', h('span', { class: 'reason' }, held.reason || '')],
        ['Held at', when(a.createTime)],
        ['Expires', when(a.expireTime)],
        ['Approval', a.approvalId],
      ]),
      labelsList(a),
      ctx,
      h('details', {},
        h('summary', {}, 'Exact request (fingerprint ', h('code', {}, (a.requestFingerprint || '').slice(0, 16) + '…'), ')'),
        h('pre', { class: 'canonical' }, a.canonicalRequest || ''),
        h('p', { class: 'hint' }, 'SHA-256: ', h('code', {}, a.requestFingerprint || ''))),
      h('div', { class: 'field' }, h('label', { for: noteEl.id }, 'Reason for your decision'), noteEl),
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'approve', onclick: act('approve') }, 'Approve'),
        h('button', { type: 'button', class: 'reject danger', onclick: act('reject') }, 'Reject'),
        h('button', { type: 'button', class: 'secondary refresh-context', onclick: () => want(a, ctx, true) }, 'Refresh balance')),
      err);
  }

  // labelsList shows the free text and other labels the held request
  // carries (metadata, notes, description, …): approving covers exactly
  // these, so they are shown whole, as inert text (h() makes text nodes),
  // never as markup. The same action with other labels is a new hold.
  function labelsList(a) {
    const names = Object.keys(a.labels || {}).sort();
    if (!names.length) return h('p', { class: 'hint labels none' }, 'No free text or other labels: the request carries none.');
    return h('section', { class: 'labels', 'aria-label': 'Labels' },
      h('h3', {}, 'Text this request sends (approved with it)'),
      h('dl', { class: 'labels' }, ...names.flatMap(k => [h('dt', {}, h('code', {}, k)), h('dd', {}, h('pre', { class: 'label-value' }, a.labels[k]))])),
      h('p', { class: 'hint' }, 'Labels SHA-256: ', h('code', {}, a.labelsDigest || '')));
  }

  // Live context (GetApproval: a rail read for a refund) is fetched only
  // for cards on screen, two at a time, and again when it is over 30 s old
  // and still on screen, or when the owner asks: a flood of HOLDs costs
  // what the owner looks at, not what the agent sent.
  const loaded = new Map(); // approval id → time its context was fetched
  const queue = [];
  let running = 0;
  function want(a, el, now) {
    const at = loaded.get(a.approvalId);
    if (!now && at !== undefined && Date.now() - at < 30000) return;
    if (queue.some(q => q.a.approvalId === a.approvalId)) return;
    loaded.set(a.approvalId, Date.now());
    queue.push({ a, el });
    pump();
  }
  function pump() {
    while (running < 2 && queue.length && !closed) {
      const { a, el } = queue.shift();
      running++;
      loadContext(a, el).finally(() => { running--; pump(); });
    }
  }
  const visible = new Set();
  const seen = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const id = e.target.getAttribute('data-approval-id');
      if (e.isIntersecting) visible.add(id); else visible.delete(id);
      const a = items.find(x => x.approvalId === id);
      if (e.isIntersecting && a) want(a, e.target.querySelector('.live-context'), false);
    }
  });
  new MutationObserver(() => {
    for (const el of list.querySelectorAll('article.approval')) seen.observe(el);
  }).observe(list, { childList: true });

  async function loadContext(a, el) {
    try {
      const res = await api.get('/v1/approvals/' + api.seg(a.approvalId));
      const live = res.live || {};
      const parts = [];
      if (a.actionKind === 'ACTION_KIND_REFUND') {
        parts.push(live.refundableError
          ? h('p', { class: 'warn refundable' }, 'Refundable balance unknown: ', live.refundableError)
          : h('p', { class: 'refundable' }, 'Still refundable on ', a.subject, ' now: ', h('strong', {}, live.refundable ? format(live.refundable, a.rail) : '—'),
            live.railRefundable ? h('span', { class: 'hint' }, ' (the rail says ', format(live.railRefundable, a.rail),
              live.ledgerOutstanding && live.ledgerOutstanding.amountMinor !== '0' ? ['; ', format(live.ledgerOutstanding, a.rail), ' is in flight'] : '', ')') : null));
      }
      if (live.mandateUsage) parts.push(usageBars(live.mandateUsage, a.rail, { compact: true }));
      if (live.asOf) parts.push(h('p', { class: 'hint' }, 'As of ', when(live.asOf)));
      replace(el, parts.length ? parts : h('p', { class: 'hint' }, 'No balance or budget applies.'));
    } catch (e) {
      replace(el, h('p', { class: 'warn' }, 'Balance and budget unavailable: ', e.message));
    }
  }

  const tick = setInterval(() => {
    let due = false;
    for (const t of list.querySelectorAll('.time-left')) {
      const s = left(t.getAttribute('data-expire'));
      t.textContent = s;
      if (s === 'expired') due = true;
    }
    if (due) schedule();
    for (const id of visible) {
      const a = items.find(x => x.approvalId === id);
      const el = cards.get(id);
      if (a && el) want(a, el.querySelector('.live-context'), false);
    }
  }, 1000);
  const w = api.watch('/v1/approvals:watch', () => schedule(), (s) => { live.textContent = s === 'live' ? 'live' : 'reconnecting…'; live.className = 'badge ' + s; });
  refresh().catch(e => replace(list, h('p', { class: 'error', role: 'alert' }, 'Could not load approvals: ' + e.message)));
  return () => { closed = true; clearInterval(tick); if (timer) clearTimeout(timer); seen.disconnect(); w.stop(); };
}
