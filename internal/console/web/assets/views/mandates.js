// mandates.js lists mandates and shows one: the YAML as stored, its hash,
// validity, and usage against every budget and window.
import { h, replace, field, dl, when, enumText, status, hashQuery } from '../dom.js';
import * as api from '../api.js';
import { usageBars } from './usage.js';

export async function mandatesView(el) {
  const params = hashQuery();
  const agent = h('input', { name: 'agent', value: params.get('agent') || '', autocomplete: 'off' });
  const state = h('select', { name: 'state' },
    h('option', { value: '' }, 'any'),
    h('option', { value: 'MANDATE_STATE_ACTIVE' }, 'active'),
    h('option', { value: 'MANDATE_STATE_REVOKED' }, 'revoked'));
  state.value = params.get('state') || '';
  const table = h('div', { id: 'mandates' });
  async function load() {
    const r = await api.get('/v1/mandates' + api.q({ pageSize: 500, agentId: agent.value.trim(), state: state.value }));
    const ms = r.mandates || [];
    replace(table, ms.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['Mandate', 'Agent', 'Rail account', 'Purpose', 'Valid', 'State'].map(t => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, ms.map(m => {
        const md = m.mandate || {};
        return h('tr', { 'data-mandate-hash': m.mandateHash, 'data-rail-account': md.railAccount || '' },
          h('td', {}, h('a', { href: '#/mandates/' + encodeURIComponent(m.mandateHash) }, h('code', {}, m.mandateHash.slice(0, 16) + '…'))),
          h('td', {}, md.agentId || ''), h('td', {}, md.railAccount || ''), h('td', {}, md.purpose || ''),
          h('td', {}, when(md.validFrom), ' → ', when(md.validUntil)),
          h('td', {}, enumText(m.state, 'MANDATE_STATE_')));
      })))
      : h('p', { class: 'empty' }, 'No mandates match.'));
  }
  const filters = h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); load().catch(e => status(e.message, 'error')); } },
    field('Agent', agent), field('State', state), h('button', { type: 'submit' }, 'Filter'));
  replace(el, h('h1', {}, 'Mandates'),
    h('p', { class: 'hint' }, 'A mandate never changes once created; a new policy is a new mandate. Create them with ', h('code', {}, 'countersign mandate create'), '.'),
    filters, table);
  await load();
}

export async function mandateView(el, hash) {
  const r = await api.get('/v1/mandates/' + api.seg(hash));
  const m = r.mandate;
  const md = m.mandate || {};
  const usage = h('div', { id: 'usage' }, h('p', { class: 'hint' }, 'Loading usage…'));
  const now = Date.now();
  const valid = m.state === 'MANDATE_STATE_ACTIVE' && new Date(md.validFrom) <= now && now < new Date(md.validUntil);
  const reason = h('input', { name: 'reason', maxlength: '500', autocomplete: 'off' });
  replace(el,
    h('p', {}, h('a', { href: '#/mandates' }, '← Mandates')),
    h('h1', {}, 'Mandate'),
    dl([
      ['Hash', h('code', { id: 'mandate-hash' }, m.mandateHash)],
      ['State', enumText(m.state, 'MANDATE_STATE_')],
      ['In force now', valid ? 'yes' : 'no'],
      ['Valid from', when(md.validFrom)], ['Valid until', when(md.validUntil)],
      ['Agent', md.agentId ? h('a', { href: '#/agents/' + encodeURIComponent(md.agentId) }, md.agentId) : null],
      ['Rail account', md.railAccount], ['Mode', md.mode ? enumText(md.mode, 'MANDATE_MODE_') : null],
      ['Created', when(m.createTime)], ['Revoked', m.revokeTime ? when(m.revokeTime) : null], ['Revoke reason', m.revokeReason],
    ]),
    h('h2', {}, 'Usage'), usage,
    h('h2', {}, 'As stored'),
    h('pre', { class: 'yaml', id: 'mandate-yaml' }, m.yaml || JSON.stringify(md, null, 2)),
    m.state === 'MANDATE_STATE_ACTIVE' ? h('form', { id: 'revoke-mandate', class: 'card danger-zone', onsubmit: async (ev) => {
      ev.preventDefault();
      if (!confirm('Revoke this mandate? No decision under it passes again, and its held approvals are voided.')) return;
      try { await api.post(`/v1/mandates/${api.seg(hash)}:revoke`, { reason: reason.value.trim() }); status('Revoked the mandate.', 'ok'); await mandateView(el, hash); } catch (e) { status(e.message, 'error'); }
    } }, h('h2', {}, 'Revoke this mandate'), field('Reason', reason), h('button', { type: 'submit', class: 'danger' }, 'Revoke mandate')) : null);
  try {
    const u = await api.get(`/v1/mandates/${api.seg(hash)}/usage`);
    replace(usage, usageBars(u.usage || u, railOf(md)), u.usage && u.usage.asOf ? h('p', { class: 'hint' }, 'As of ', when(u.usage.asOf)) : null);
  } catch (e) {
    replace(usage, h('p', { class: 'warn' }, 'Usage unavailable: ', e.message));
  }
}

function railOf(md) { return md.rail || ''; }
