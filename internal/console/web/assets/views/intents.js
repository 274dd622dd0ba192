// intents.js lists intents newest first, filtered by state, agent and
// subject, and shows one intent's timeline: every audited transition, its
// attempts with the rail's answers, and what reconciliation found.
import { h, replace, field, dl, when, enumText, status, hashQuery } from '../dom.js';
import * as api from '../api.js';
import { format } from '../money.js';

const states = ['PROPOSED', 'HELD', 'AUTHORIZED', 'IN_FLIGHT', 'APPLIED', 'FAILED_TERMINAL', 'UNKNOWN',
  'RECONCILING', 'CONFIRMED_NOT_APPLIED', 'BLOCKED', 'QUARANTINED'];

export async function intentsView(el) {
  const params = hashQuery();
  const state = h('select', { name: 'state' }, h('option', { value: '' }, 'any'),
    states.map(s => h('option', { value: 'INTENT_STATE_' + s }, s.toLowerCase().replaceAll('_', ' '))));
  state.value = params.get('state') || '';
  const agent = h('input', { name: 'agent', value: params.get('agent') || '', autocomplete: 'off' });
  const subject = h('input', { name: 'subject', value: params.get('subject') || '', autocomplete: 'off' });
  const body = h('tbody', {});
  const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
  let token = '';

  async function load(reset) {
    if (reset) { token = ''; body.replaceChildren(); }
    const r = await api.get('/v1/intents' + api.q({ pageSize: 50, pageToken: token, state: state.value, agentId: agent.value.trim(), subject: subject.value.trim() }));
    for (const i of r.intents || []) {
      body.appendChild(h('tr', { 'data-sik': i.sik },
        h('td', {}, when(i.createTime)),
        h('td', {}, h('a', { href: `#/intents/${encodeURIComponent(i.railAccount)}/${encodeURIComponent(i.sik)}` }, h('code', {}, i.sik))),
        h('td', {}, h('span', { class: 'state ' + (i.state || '').toLowerCase() }, enumText(i.state, 'INTENT_STATE_'))),
        h('td', {}, enumText(i.actionKind, 'ACTION_KIND_')),
        h('td', {}, format(i.amount, i.rail)),
        h('td', {}, i.subject || ''),
        h('td', {}, i.agentId || ''),
        h('td', { class: 'reason' }, i.lastReason || '')));
    }
    token = r.nextPageToken || '';
    more.hidden = !token;
    if (!body.children.length) body.appendChild(h('tr', {}, h('td', { colspan: '8', class: 'empty' }, 'No intents match.')));
  }
  more.addEventListener('click', () => load(false).catch(e => status(e.message, 'error')));
  const filters = h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); load(true).catch(e => status(e.message, 'error')); } },
    field('State', state), field('Agent', agent), field('Subject', subject), h('button', { type: 'submit' }, 'Filter'));
  replace(el, h('h1', {}, 'Intents'), filters,
    h('div', { class: 'scroll' }, h('table', { id: 'intents' },
      h('thead', {}, h('tr', {}, ['Created', 'Key', 'State', 'Action', 'Amount', 'Subject', 'Agent', 'Last reason'].map(t => h('th', { scope: 'col' }, t)))),
      body)), more);
  await load(true);
}

export async function intentView(el, railAccount, sik) {
  const r = await api.get(`/v1/intents/${api.seg(railAccount)}/${api.seg(sik)}`);
  const i = r.intent;
  let transitions = r.transitions;
  if (!transitions) {
    const a = await api.get('/v1/auditRecords' + api.q({ railAccount, sik, pageSize: 1000 }));
    transitions = a.auditRecords || [];
  }
  const attempts = r.attempts || [];
  replace(el,
    h('p', {}, h('a', { href: '#/intents' }, '← Intents')),
    h('h1', {}, enumText(i.actionKind, 'ACTION_KIND_'), ' of ', format(i.amount, i.rail)),
    dl([
      ['State', h('span', { class: 'state ' + (i.state || '').toLowerCase(), id: 'intent-state' }, enumText(i.state, 'INTENT_STATE_'))],
      ['Key', h('code', {}, i.sik)], ['Rail account', i.railAccount], ['Rail', enumText(i.rail, 'RAIL_')],
      ['Subject', i.subject], ['Payee', i.payee], ['Distinct', i.distinct],
      ['Agent', i.agentId ? h('a', { href: '#/agents/' + encodeURIComponent(i.agentId) }, i.agentId) : null],
      ['Mandate', i.mandateHash ? h('a', { href: '#/mandates/' + encodeURIComponent(i.mandateHash) }, h('code', {}, i.mandateHash.slice(0, 16) + '…')) : null],
      ['Rail entity', i.railEntityId], ['Approval', i.approvalId],
      ['Last reason', i.lastReason ? h('span', { class: 'reason' }, i.lastReason, i.lastReasonCode ? ` (${i.lastReasonCode})` : '') : null],
      ['Created', when(i.createTime)], ['Updated', when(i.updateTime)],
    ]),
    h('h2', {}, 'Timeline'),
    h('ol', { class: 'timeline', id: 'timeline' }, transitions.map(t => h('li', {},
      h('time', {}, when(t.commitTime)), ' ',
      h('strong', {}, enumText(t.event, 'INTENT_EVENT_')), ': ',
      !t.fromState || t.fromState === 'INTENT_STATE_UNSPECIFIED'
        ? ['recorded as ', enumText(t.toState, 'INTENT_STATE_')]
        : [enumText(t.fromState, 'INTENT_STATE_'), ' → ', enumText(t.toState, 'INTENT_STATE_')],
      t.attemptSeq ? ` (attempt ${t.attemptSeq})` : '',
      t.reason ? h('div', { class: 'reason' }, t.reason) : null,
      h('div', { class: 'hint' }, 'record ', String(t.recordId || ''), t.leafIndex !== undefined && t.leafHash ? ` · sealed as leaf ${t.leafIndex}` : ' · not yet sealed')))),
    h('h2', {}, 'Attempts'),
    attempts.length ? h('div', { class: 'scroll' }, h('table', { id: 'attempts' },
      h('thead', {}, h('tr', {}, ['#', 'Outcome', 'HTTP', 'Rail error', 'Entity', 'Fee', 'Idempotency key', 'Started', 'Ended'].map(t => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, attempts.map(a => h('tr', {},
        h('td', {}, String(a.attemptSeq)), h('td', {}, enumText(a.outcome, 'ATTEMPT_OUTCOME_')),
        h('td', {}, a.httpStatus ? String(a.httpStatus) : (a.transportError && a.transportError !== 'TRANSPORT_ERROR_UNSPECIFIED' ? enumText(a.transportError, 'TRANSPORT_ERROR_') : '—')),
        h('td', {}, a.railErrorCode || ''), h('td', {}, a.railEntityId || ''), h('td', {}, a.fee ? format(a.fee, i.rail) : ''),
        h('td', {}, h('code', {}, a.idempotencyKey || '')), h('td', {}, when(a.startTime)), h('td', {}, when(a.endTime)))))))
      : h('p', { class: 'empty' }, 'No attempt has been made.'),
    (r.findings || []).length ? [h('h2', {}, 'Reconciliation'),
      h('ul', { id: 'findings' }, r.findings.map(f => h('li', {},
        h('time', {}, when(f.findTime)), ' attempt ', String(f.attemptSeq || ''), ': ',
        h('strong', {}, enumText(f.outcome, 'RECONCILE_OUTCOME_')),
        ` after ${f.pagesRead || 0} page(s)`, f.paginationExhausted ? ', every page read' : ', pagination not exhausted',
        f.railEntityId ? [', found ', h('code', {}, f.railEntityId)] : '',
        f.reason ? h('div', { class: 'reason' }, f.reason) : null)))] : null,
    r.storedAnswer ? [h('h2', {}, 'Stored rail answer'),
      h('p', { class: 'hint' }, 'What a duplicate of this request is answered with, without calling the rail.'),
      dl([['From', enumText(r.storedAnswer.source, 'STORED_RAIL_ANSWER_SOURCE_')], ['Attempt', r.storedAnswer.attemptSeq ? String(r.storedAnswer.attemptSeq) : null],
        ['HTTP status', r.storedAnswer.httpStatus ? String(r.storedAnswer.httpStatus) : null], ['Entity', r.storedAnswer.railEntityId]]),
      r.storedAnswer.body ? h('pre', { class: 'canonical', id: 'rail-answer' }, r.storedAnswer.body) : null] : null);
}
