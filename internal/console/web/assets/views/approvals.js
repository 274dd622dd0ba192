// approvals.js is the queue of held requests: pending approvals sorted by
// expiry, each with what it would do, why it was held, the balance and
// budget it would draw on now, and the exact request it is bound to. It
// follows WatchApprovals and refreshes when a HOLD arrives or an approval is
// approved, rejected, used, voided or runs out.
//
// The queue holds still while the owner is in it (the pointer over it, a
// finger on it, or focus inside it): an agent can open holds at will, and
// one that sorts above the card the owner is reading would otherwise move
// another card's Approve button under the owner's click. So while the owner
// is in the queue no card is inserted (a fixed line above the list counts
// them) and none is removed (one that stopped waiting is marked so in
// place, its buttons disabled); the changes are made when the owner leaves
// the queue, or asks for them with "Show them". Nor does a card change
// height when its live context loads (a rail read, answered when the agent's
// rail answers, for cards the agent can make sort first): it loads into a
// box of fixed height, scrolled within (console.css), so the card the owner
// points at shows its own balance and no load above it moves it.
import { h, replace, dl, when, left, enumText, status } from '../dom.js';
import * as api from '../api.js';
import { format } from '../money.js';
import { usageBars } from './usage.js';

export function approvalsView(el) {
  const list = h('div', { id: 'approvals', class: 'stack' });
  const live = h('span', { id: 'live', class: 'badge' }, 'connecting…');
  // The line above the list is always there and always the same height, so
  // its text changing never moves the cards.
  const heldCount = h('span', { class: 'count' });
  const showHeld = h('button', { type: 'button', class: 'secondary show-held', id: 'show-held', onclick: () => apply() }, 'Show them');
  const pendingLine = h('div', { class: 'queue-pending none', id: 'approvals-pending', role: 'status', 'aria-live': 'polite' }, heldCount, showHeld);
  replace(el,
    h('div', { class: 'titlebar' }, h('h1', {}, 'Approvals'), live),
    h('p', { class: 'hint' }, 'Requests your agents made that a mandate held for you. Approving one lets that exact request through once, re-checked against the mandate\u2019s live limits; a changed request is a new hold.'),
    pendingLine,
    list);

  let items = [];
  let timer = null;
  let closed = false;

  // A list read before a later one (say, before the owner's approval) must
  // not overwrite it when it answers last: only the latest read is shown.
  let reads = 0;
  async function refresh() {
    if (closed) return;
    const read = ++reads;
    const res = await api.get('/v1/approvals' + api.q({ state: 'APPROVAL_STATE_PENDING', pageSize: 200 }));
    if (read !== reads || closed) return;
    items = (res.approvals || []).filter(a => !decidedHere.has(a.approvalId))
      .sort((a, b) => new Date(a.expireTime) - new Date(b.expireTime));
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

  // Whether the owner is in the queue. A mouse or pen is in it from
  // pointerenter to pointerleave; a finger has no hover, so a touch in the
  // queue holds it until the next touch outside it. Focus is in it while
  // document.activeElement is, which stays so while the window is in the
  // background.
  let pointerIn = false;
  let touchIn = false;
  function inQueue() {
    return pointerIn || touchIn || list.contains(document.activeElement);
  }
  // settle applies what waited for the owner to leave, once they have.
  function settle() {
    if (!closed && !inQueue()) render();
  }
  list.addEventListener('pointerenter', (e) => { if (e.pointerType === 'touch') touchIn = true; else pointerIn = true; });
  list.addEventListener('pointerleave', (e) => { if (e.pointerType !== 'touch') { pointerIn = false; settle(); } });
  list.addEventListener('pointerdown', (e) => { if (e.pointerType === 'touch') touchIn = true; });
  const touchOutside = (e) => {
    if (e.pointerType === 'touch' && touchIn && !list.contains(e.target)) { touchIn = false; settle(); }
  };
  document.addEventListener('pointerdown', touchOutside, true);
  // On focusout the next element is not yet focused: look once it is.
  let settleTimer = null;
  list.addEventListener('focusin', () => { if (settleTimer) { clearTimeout(settleTimer); settleTimer = null; } });
  list.addEventListener('focusout', () => {
    if (settleTimer) clearTimeout(settleTimer);
    settleTimer = setTimeout(() => { settleTimer = null; settle(); }, 0);
  });

  // What the watch last said of each approval, to say why a card stopped
  // waiting, and what the owner decided in this page.
  const lastState = new Map(); // approval id → APPROVAL_STATE_…
  const decidedHere = new Map(); // approval id → 'approve' | 'reject' (kept: a late list must not bring it back)
  function noted(msg) {
    const ap = msg && msg.approval;
    if (ap && ap.approvalId && ap.state) lastState.set(ap.approvalId, ap.state);
  }
  const gone = {
    APPROVAL_STATE_APPROVED: 'No longer waiting: approved elsewhere.',
    APPROVAL_STATE_REJECTED: 'No longer waiting: rejected elsewhere.',
    APPROVAL_STATE_USED: 'No longer waiting: approved and used.',
    APPROVAL_STATE_VOID: 'No longer waiting: voided.',
    APPROVAL_STATE_EXPIRED: 'No longer waiting: expired.',
  };
  function whyGone(id, a) {
    const mine = decidedHere.get(id);
    if (mine) return mine === 'approve' ? 'Approved by you; no longer waiting.' : 'Rejected by you; no longer waiting.';
    if (gone[lastState.get(id)]) return gone[lastState.get(id)];
    if (a && left(a.expireTime) === 'expired') return gone.APPROVAL_STATE_EXPIRED;
    return 'No longer waiting.';
  }

  // render updates the list in place. A card that is still pending keeps
  // its element (and with it the note being typed and the focus). While
  // the owner is in the queue, new cards wait (counted above the list) and
  // decided ones are only marked; otherwise new ones are inserted in expiry
  // order and decided ones removed.
  const cards = new Map(); // approval id → { el, a, stop(text) }
  const empty = h('p', { class: 'empty', id: 'no-approvals' }, 'Nothing is waiting for you.');
  function render() {
    // With no card on screen there is nothing a change could move.
    if (!inQueue() || !cards.size) { apply(); return; }
    const want = new Set(items.map(a => a.approvalId));
    for (const [id, c] of cards) {
      if (!want.has(id)) c.stop(whyGone(id, c.a));
    }
    showWaiting(items.filter(a => !cards.has(a.approvalId)).length);
  }

  function apply() {
    const want = new Set(items.map(a => a.approvalId));
    for (const [id, c] of cards) {
      if (!want.has(id)) {
        c.el.remove(); cards.delete(id); seen.unobserve(c.el); visible.delete(id);
        lastState.delete(id);
      }
    }
    for (const id of lastState.keys()) if (!want.has(id)) lastState.delete(id);
    showWaiting(0);
    if (!items.length) { replace(list, empty); return; }
    for (const n of [...list.children]) if (!n.matches('article.approval')) n.remove();
    let prev = null;
    for (const a of items) {
      let c = cards.get(a.approvalId);
      if (!c) { c = card(a); cards.set(a.approvalId, c); }
      const at = prev ? prev.nextSibling : list.firstChild;
      if (at !== c.el) list.insertBefore(c.el, at);
      prev = c.el;
    }
  }

  function showWaiting(n) {
    heldCount.textContent = n ? `${n} more held request${n === 1 ? '' : 's'} will appear when you move away from the queue.` : '';
    pendingLine.classList.toggle('none', !n);
  }

  function card(a) {
    // The live context's box is one height, loaded or not (console.css);
    // it scrolls, so it can take focus to be scrolled by keyboard.
    const ctx = h('div', { class: 'live-context', role: 'group', 'aria-label': 'Balance and budget', tabindex: '0' },
      h('p', { class: 'hint' }, 'Balance and budget load when this request is on screen.'));
    const noteEl = h('textarea', { rows: '2', 'data-approval-id': a.approvalId, id: 'note-' + a.approvalId, maxlength: '1000' });
    const err = h('p', { class: 'error', role: 'alert' });
    // A line of fixed height that says whether the request still waits, so
    // marking it decided changes no card's size.
    const stateLine = h('p', { class: 'card-state' }, 'Waiting for your decision.');
    let busy = false;
    const act = (verb) => async () => {
      if (busy || el.classList.contains('stale')) return;
      err.textContent = '';
      if (verb === 'reject' && !noteEl.value.trim()) { err.textContent = 'Say why you reject it.'; noteEl.focus(); return; }
      busy = true;
      try {
        const body = verb === 'approve'
          ? { requestFingerprint: a.requestFingerprint, note: noteEl.value.trim() }
          : { note: noteEl.value.trim() };
        await api.post(`/v1/approvals/${api.seg(a.approvalId)}:${verb}`, body);
        decidedHere.set(a.approvalId, verb);
        stop(whyGone(a.approvalId, a));
        status(verb === 'approve' ? `Approved ${a.approvalId}: the agent's identical request will pass once.` : `Rejected ${a.approvalId}.`, 'ok');
        await refresh();
      } catch (e) {
        err.textContent = e.message;
      } finally {
        busy = false;
      }
    };
    const buttons = [
      h('button', { type: 'button', class: 'approve', onclick: act('approve') }, 'Approve'),
      h('button', { type: 'button', class: 'reject danger', onclick: act('reject') }, 'Reject'),
      h('button', { type: 'button', class: 'secondary refresh-context', onclick: () => want(a, ctx, true) }, 'Refresh balance'),
    ];
    // stop marks the card as no longer waiting, in place: same size, its
    // buttons disabled. Focus on a button it disables moves to the card, so
    // it stays in the queue (and the queue holds still).
    function stop(text) {
      if (!el.classList.contains('stale') && buttons.includes(document.activeElement)) el.focus({ preventScroll: true });
      el.classList.add('stale');
      stateLine.textContent = text;
      for (const b of buttons) b.disabled = true;
      noteEl.readOnly = true;
    }
    const held = a.heldBy || {};
    const el = h('article', { class: 'card approval', 'data-approval-id': a.approvalId, 'aria-labelledby': 'h-' + a.approvalId, tabindex: '-1' },
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
      termsList(a),
      labelsList(a),
      ctx,
      h('details', {},
        h('summary', {}, 'Exact request (fingerprint ', h('code', {}, (a.requestFingerprint || '').slice(0, 16) + '…'), ')'),
        h('pre', { class: 'canonical' }, a.canonicalRequest || ''),
        h('p', { class: 'hint' }, 'SHA-256: ', h('code', {}, a.requestFingerprint || ''))),
      h('div', { class: 'field' }, h('label', { for: noteEl.id }, 'Reason for your decision'), noteEl),
      stateLine,
      h('div', { class: 'actions' }, buttons),
      err);
    return { el, a, stop };
  }

  // termsList shows the members of the exact request that change what it
  // does beyond its action, amount, subject and payee (a payout's source
  // account and mode, an instant payout's method, a refund's speed), and
  // the agent's reason to send it again: approving covers them, so the
  // card shows them, not only the collapsed exact request (found by a
  // review). They come after the card's own facts, under a heading of
  // their own, names as code, at most maxTerms of them: a native caller
  // names its members, and one named "Amount" or "Held by", or thirty of
  // them, must not pass for the card's facts or push them away (found by
  // a review of the first version).
  const maxTerms = 8;
  function termsList(a) {
    let req;
    try { req = JSON.parse(a.canonicalRequest || '{}'); } catch { return h('p', { class: 'hint terms' }, 'The exact request below could not be read.'); }
    const extra = (req && typeof req.extra === 'object' && req.extra) || {};
    const rows = Object.keys(extra).sort().map(k => [h('code', {}, k), String(extra[k])]);
    if (req && req.distinct) rows.unshift(['Sent again because', String(req.distinct)]);
    if (!rows.length) return null;
    const shown = rows.slice(0, maxTerms);
    return h('section', { class: 'terms', 'aria-label': 'What else the request sets' },
      h('h3', {}, 'What else the request sets (approved with it)'),
      h('dl', { class: 'terms' }, ...shown.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      rows.length > shown.length ? h('p', { class: 'hint' }, `${rows.length - shown.length} more in the exact request below.`) : null);
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
      h('dl', { class: 'labels' }, ...names.flatMap(k => [h('dt', {}, h('code', {}, k)), h('dd', {}, h('pre', { class: 'label-value' }, breaksShown(a.labels[k])))])),
      h('p', { class: 'hint' }, 'Labels SHA-256: ', h('code', {}, a.labelsDigest || '')));
  }

  // breaksShown marks each line break of a label's value with ⏎, so text
  // the agent wrote over several lines cannot pass for the card's own
  // facts ("Amount", "Payee") below its name (found by a review).
  function breaksShown(v) {
    return String(v).replace(/\n/g, '\u23CE\n');
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
    // Read again only when the owner is not in the queue, not to change
    // the figures under their eyes. (A read moves no card: the box keeps
    // its height, which the first read, run whenever a card comes on
    // screen, relies on.)
    if (!now && at !== undefined && (Date.now() - at < 30000 || inQueue())) return;
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
              live.ledgerOutstanding && live.ledgerOutstanding.amountMinor !== '0' ? ['; ', format(live.ledgerOutstanding, a.rail), ' is in flight or quarantined, awaiting your resolution'] : '', ')') : null));
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
    for (const t of list.querySelectorAll('article.approval:not(.stale) .time-left')) {
      const s = left(t.getAttribute('data-expire'));
      t.textContent = s;
      if (s === 'expired') due = true;
    }
    if (due) schedule();
    for (const id of visible) {
      const a = items.find(x => x.approvalId === id);
      const c = cards.get(id);
      if (a && c) want(a, c.el.querySelector('.live-context'), false);
    }
  }, 1000);
  const w = api.watch('/v1/approvals:watch', (msg) => { noted(msg); schedule(); }, (s) => { live.textContent = s === 'live' ? 'live' : 'reconnecting…'; live.className = 'badge ' + s; });
  refresh().catch(e => replace(list, h('p', { class: 'error', role: 'alert' }, 'Could not load approvals: ' + e.message)));
  return () => {
    closed = true; clearInterval(tick); if (timer) clearTimeout(timer); if (settleTimer) clearTimeout(settleTimer);
    document.removeEventListener('pointerdown', touchOutside, true); seen.disconnect(); w.stop();
  };
}
