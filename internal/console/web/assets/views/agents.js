// agents.js lists agents and shows one with its credentials. A credential's
// secret is shown once, when it is issued, and never again.
import { h, replace, field, dl, when, enumText, status } from '../dom.js';
import * as api from '../api.js';

export async function agentsView(el) {
  const showRevoked = h('input', { type: 'checkbox', id: 'show-revoked' });
  const table = h('div', { id: 'agents' });
  async function load() {
    const res = await api.get('/v1/agents' + api.q({ pageSize: 500, showRevoked: showRevoked.checked || undefined }));
    const agents = res.agents || [];
    replace(table, agents.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['Agent', 'Name', 'State', 'Created'].map(t => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, agents.map(a => h('tr', { 'data-agent-id': a.agentId },
        h('td', {}, h('a', { href: '#/agents/' + encodeURIComponent(a.agentId) }, a.agentId)),
        h('td', {}, a.displayName || ''),
        h('td', {}, enumText(a.state, 'AGENT_STATE_')),
        h('td', {}, when(a.createTime))))))
      : h('p', { class: 'empty' }, 'No agents yet.'));
  }
  showRevoked.addEventListener('change', () => load().catch(e => status(e.message, 'error')));

  const name = h('input', { name: 'displayName', required: true, maxlength: '200', autocomplete: 'off' });
  const err = h('p', { class: 'error', role: 'alert' });
  const form = h('form', { id: 'create-agent', class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    try {
      const r = await api.post('/v1/agents', { displayName: name.value.trim() });
      status('Created agent ' + r.agent.agentId + '.', 'ok');
      form.reset();
      location.hash = '#/agents/' + encodeURIComponent(r.agent.agentId);
    } catch (e) { err.textContent = e.message; }
  } },
  h('h2', {}, 'New agent'),
  field('Display name', name),
  h('p', { class: 'hint' }, 'Countersign gives the agent its id (agt_…).'),
  h('button', { type: 'submit' }, 'Create agent'), err);

  replace(el, h('h1', {}, 'Agents'),
    h('div', { class: 'field inline' }, showRevoked, h('label', { for: 'show-revoked' }, 'Show revoked agents')),
    table, form);
  await load();
}

export async function agentView(el, agentId) {
  const res = await api.get('/v1/agents/' + api.seg(agentId));
  const a = res.agent;
  const creds = h('div', { id: 'credentials' });
  const secretBox = h('div', { id: 'secret-box' });

  async function loadCreds() {
    const r = await api.get(`/v1/agents/${api.seg(agentId)}/credentials` + api.q({ pageSize: 500 }));
    const list = r.credentials || [];
    replace(creds, list.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['Credential', 'Name', 'Scope', 'State', 'Expires', 'Last used', ''].map(t => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, list.map(c => h('tr', { 'data-credential-id': c.credentialId },
        h('td', {}, h('code', {}, c.credentialId), ' ', h('span', { class: 'hint' }, (c.secretPrefix || '') + '…')),
        h('td', {}, c.displayName || ''),
        h('td', {}, enumText(c.scope, 'CREDENTIAL_SCOPE_')),
        h('td', {}, enumText(c.state, 'CREDENTIAL_STATE_')),
        h('td', {}, when(c.expireTime)),
        h('td', {}, c.lastUseTime ? when(c.lastUseTime) : 'never'),
        h('td', {}, c.state === 'CREDENTIAL_STATE_ACTIVE'
          ? h('button', { type: 'button', class: 'danger small', onclick: async () => {
            if (!confirm('Revoke credential ' + c.credentialId + '? The agent\u2019s next request with it is refused.')) return;
            try { await api.post(`/v1/agents/${api.seg(agentId)}/credentials/${api.seg(c.credentialId)}:revoke`, {}); status('Revoked ' + c.credentialId + '.', 'ok'); await loadCreds(); } catch (e) { status(e.message, 'error'); }
          } }, 'Revoke') : '')))))
      : h('p', { class: 'empty' }, 'No credentials.'));
  }

  const scope = h('select', { name: 'scope' },
    h('option', { value: 'CREDENTIAL_SCOPE_EXECUTE' }, 'execute — requests may leave when allowed'),
    h('option', { value: 'CREDENTIAL_SCOPE_PROPOSE' }, 'propose — decisions only, nothing leaves'));
  const days = h('input', { type: 'number', min: '1', max: '365', value: '30', name: 'days' });
  const cname = h('input', { name: 'displayName', maxlength: '200', autocomplete: 'off' });
  const err = h('p', { class: 'error', role: 'alert' });
  const issue = h('form', { id: 'issue-credential', class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    try {
      const exp = new Date(Date.now() + Number(days.value) * 86400000).toISOString();
      const r = await api.post(`/v1/agents/${api.seg(agentId)}/credentials`, { scope: scope.value, expireTime: exp, displayName: cname.value.trim() });
      showSecret(r.secret, r.credential);
      await loadCreds();
    } catch (e) { err.textContent = e.message; }
  } },
  h('h2', {}, 'Issue a credential'),
  field('Scope', scope), field('Expires in (days)', days), field('Name', cname),
  h('button', { type: 'submit' }, 'Issue credential'), err);

  function showSecret(secret, c) {
    const out = h('input', { type: 'text', readonly: true, id: 'new-secret', class: 'secret', value: secret, 'aria-describedby': 'secret-warning' });
    const copied = h('span', { class: 'hint', role: 'status' });
    replace(secretBox, h('div', { class: 'card warn-card' },
      h('h2', {}, 'New credential ', c.credentialId),
      h('p', { id: 'secret-warning', class: 'warn' }, 'This is the only time the secret is shown. Put it where the agent reads its rail key now; Countersign keeps only its hash.'),
      h('div', { class: 'row' }, out,
        h('button', { type: 'button', id: 'copy-secret', onclick: async () => {
          try { await navigator.clipboard.writeText(secret); copied.textContent = 'Copied.'; } catch { out.select(); copied.textContent = 'Select and copy it by hand.'; }
        } }, 'Copy')),
      copied,
      h('button', { type: 'button', class: 'secondary', onclick: () => replace(secretBox) }, 'I have stored it')));
    out.focus();
    out.select();
  }

  const reason = h('input', { name: 'reason', maxlength: '500', autocomplete: 'off' });
  const revoke = a.state === 'AGENT_STATE_ACTIVE' ? h('form', { id: 'revoke-agent', class: 'card danger-zone', onsubmit: async (ev) => {
    ev.preventDefault();
    if (!confirm('Revoke agent ' + agentId + '? Every credential stops working and its held approvals are voided.')) return;
    try { await api.post(`/v1/agents/${api.seg(agentId)}:revoke`, { reason: reason.value.trim() }); status('Revoked agent ' + agentId + '.', 'ok'); await agentView(el, agentId); } catch (e) { status(e.message, 'error'); }
  } }, h('h2', {}, 'Revoke this agent'), field('Reason', reason), h('button', { type: 'submit', class: 'danger' }, 'Revoke agent')) : null;

  replace(el,
    h('p', {}, h('a', { href: '#/agents' }, '← Agents')),
    h('h1', {}, 'Agent ', a.agentId),
    dl([['Name', a.displayName], ['Description', a.description], ['State', enumText(a.state, 'AGENT_STATE_')],
      ['Created', when(a.createTime)], ['Revoked', a.revokeTime ? when(a.revokeTime) : null], ['Revoke reason', a.revokeReason]]),
    h('p', {}, h('a', { href: '#/intents?agent=' + encodeURIComponent(agentId) }, 'Intents of this agent'), ' · ',
      h('a', { href: '#/mandates?agent=' + encodeURIComponent(agentId) }, 'Mandates')),
    h('h2', {}, 'Credentials'), secretBox, creds,
    a.state === 'AGENT_STATE_ACTIVE' ? issue : null,
    revoke);
  await loadCreds();
}
