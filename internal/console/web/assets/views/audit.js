// audit.js verifies a rail account's audit log: every record sealed in
// order into the Merkle log, every checkpoint signed, nothing missing.
import { h, replace, field, dl, when, status } from '../dom.js';
import * as api from '../api.js';

export async function auditView(el) {
  const account = h('input', { name: 'railAccount', required: true, autocomplete: 'off' });
  const out = h('div', { id: 'verify-result', 'aria-live': 'polite' });
  const form = h('form', { id: 'verify', class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    replace(out, h('p', {}, 'Verifying…'));
    try {
      const r = await api.post('/v1/auditRecords:verify', { railAccount: account.value.trim() });
      replace(out,
        h('p', { class: r.ok ? 'ok big' : 'error big', id: 'verify-verdict' }, r.ok ? 'The log verifies.' : 'The log does NOT verify.'),
        dl([['Records checked', String(r.recordsChecked || 0)], ['Not yet sealed', String(r.recordsUnsealed || 0)],
          ['Oldest unsealed', r.oldestUnsealedTime ? when(r.oldestUnsealedTime) : null],
          ['Tree size', String(r.treeSize || 0)], ['Checkpoints checked', String(r.checkpointsChecked || 0)],
          ['Signatures checked', r.signaturesChecked ? 'yes' : 'no']]),
        (r.problems || []).length ? h('ul', { class: 'problems' }, r.problems.map(p => h('li', {},
          h('strong', {}, p.kind || 'problem'), ': ', p.problem || '', p.recordId ? ` (record ${p.recordId})` : '', p.sik ? ` intent ${p.sik}` : ''))) : null);
    } catch (e) {
      replace(out, h('p', { class: 'error', role: 'alert' }, e.message));
      status(e.message, 'error');
    }
  } },
  h('h2', {}, 'Verify a rail account\u2019s log'), field('Rail account', account), h('button', { type: 'submit' }, 'Verify'));
  replace(el, h('h1', {}, 'Audit'),
    h('p', { class: 'hint' }, 'Every intent transition writes one audit record; a sequencer seals records, in order, into a Merkle log with signed checkpoints. Verifying recomputes the tree and checks every checkpoint. Proofs for one record: ', h('code', {}, 'countersign audit prove'), '.'),
    form, out);
}
