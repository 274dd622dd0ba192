// webhooks.js lists the owner's webhooks and the dead letters of events
// that could not be delivered, with replay.
import { h, replace, when, enumText, status } from '../dom.js';
import * as api from '../api.js';

export async function webhooksView(el) {
  const hooks = h('div', { id: 'webhooks' });
  const dead = h('div', { id: 'dead-letters' });
  async function load() {
    const [w, d] = await Promise.all([
      api.get('/v1/webhooks' + api.q({ pageSize: 500 })),
      api.get('/v1/deadLetters' + api.q({ pageSize: 500 })),
    ]);
    const ws = w.webhooks || [];
    replace(hooks, ws.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['Webhook', 'URL', 'Events', 'Description', 'Created'].map(t => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, ws.map(x => h('tr', {}, h('td', {}, h('code', {}, x.webhookId)), h('td', {}, x.url),
        h('td', {}, (x.eventTypes || []).join(', ') || 'all'), h('td', {}, x.description || ''), h('td', {}, when(x.createTime))))))
      : h('p', { class: 'empty' }, 'No webhooks. Add one with ', h('code', {}, 'countersign webhook create'), '.'));
    const ds = d.deadLetters || [];
    replace(dead, ds.length ? h('table', {},
      h('thead', {}, h('tr', {}, ['Event', 'Type', 'Webhook', 'State', 'Attempts', 'Last error', 'Dead since', ''].map(t => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, ds.map(x => h('tr', { 'data-dead-letter-id': x.deadLetterId },
        h('td', {}, h('code', {}, x.eventId)), h('td', {}, x.eventType), h('td', {}, h('code', {}, x.webhookId)),
        h('td', {}, enumText(x.state, 'DEAD_LETTER_STATE_')), h('td', {}, String(x.attempts || 0)),
        h('td', {}, (x.lastHttpStatus ? `HTTP ${x.lastHttpStatus} ` : '') + (x.lastError || '')),
        h('td', {}, when(x.deadTime)),
        h('td', {}, x.state === 'DEAD_LETTER_STATE_DEAD' ? h('button', { type: 'button', class: 'small', onclick: async () => {
          try { await api.post(`/v1/deadLetters/${api.seg(x.deadLetterId)}:replay`, {}); status('Put ' + x.eventId + ' back for delivery.', 'ok'); await load(); } catch (e) { status(e.message, 'error'); }
        } }, 'Replay') : when(x.replayTime))))))
      : h('p', { class: 'empty' }, 'No dead letters: every event was delivered.'));
  }
  replace(el, h('h1', {}, 'Webhooks'), hooks, h('h2', {}, 'Dead letters'), dead);
  await load();
}
