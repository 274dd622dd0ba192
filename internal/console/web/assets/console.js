// console.js boots the owner console: it asks whether a session exists,
// shows sign-in if not, and otherwise routes #/… to a view. Views are
// plain functions that render into #view and may return a cleanup.
import { h, replace, field, status } from './dom.js';
import * as api from './api.js';
import { loadCurrencies } from './money.js';
import { approvalsView } from './views/approvals.js';
import { agentsView, agentView } from './views/agents.js';
import { mandatesView, mandateView } from './views/mandates.js';
import { intentsView, intentView } from './views/intents.js';
import { auditView } from './views/audit.js';
import { webhooksView } from './views/webhooks.js';

const app = document.getElementById('app');
let session = null;
let cleanup = null;

const routes = [
  [/^#\/approvals$/, () => approvalsView],
  [/^#\/agents$/, () => agentsView],
  [/^#\/agents\/([^/]+)$/, (m) => (el) => agentView(el, decodeURIComponent(m[1]))],
  [/^#\/mandates$/, () => mandatesView],
  [/^#\/mandates\/([^/]+)$/, (m) => (el) => mandateView(el, decodeURIComponent(m[1]))],
  [/^#\/intents$/, () => intentsView],
  [/^#\/intents\/([^/]+)\/([^/]+)$/, (m) => (el) => intentView(el, decodeURIComponent(m[1]), decodeURIComponent(m[2]))],
  [/^#\/audit$/, () => auditView],
  [/^#\/webhooks$/, () => webhooksView],
];

const nav = [
  ['#/approvals', 'Approvals'],
  ['#/agents', 'Agents'],
  ['#/mandates', 'Mandates'],
  ['#/intents', 'Intents'],
  ['#/audit', 'Audit'],
  ['#/webhooks', 'Webhooks'],
];

function shell() {
  const links = nav.map(([href, label]) => h('li', {}, h('a', { href, 'data-nav': href }, label)));
  const signout = h('button', { type: 'button', class: 'secondary', id: 'signout', onclick: signOut }, 'Sign out');
  return [
    h('a', { class: 'skip', href: '#view' }, 'Skip to content'),
    h('header', { class: 'top' },
      h('span', { class: 'brand' }, 'Countersign'),
      h('nav', { 'aria-label': 'Main' }, h('ul', {}, links)),
      h('span', { class: 'who', id: 'who' }, session ? session.subject || session.owner_id : ''),
      signout),
    h('p', { id: 'status', class: 'status', role: 'status', 'aria-live': 'polite' }),
    h('main', { id: 'view', tabindex: '-1' }),
  ];
}

function route() {
  if (!session) return;
  if (cleanup) { try { cleanup(); } catch { /* a view's cleanup never blocks navigation */ } cleanup = null; }
  let hash = location.hash || '#/approvals';
  let view = null;
  const path = hash.split('?')[0];
  for (const [re, make] of routes) {
    const m = path.match(re);
    if (m) { view = make(m); break; }
  }
  if (!view) { hash = '#/approvals'; view = approvalsView; history.replaceState(null, '', hash); }
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (path.startsWith(a.getAttribute('data-nav'))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const el = document.getElementById('view');
  status('');
  replace(el, h('p', {}, 'Loading…'));
  Promise.resolve(view(el)).then(c => { cleanup = c || null; }).catch(e => {
    replace(el, h('p', { class: 'error', role: 'alert' }, 'Could not load this view: ' + e.message));
  });
}

async function signOut() {
  try { await api.post('/console/api/signout'); } catch { /* the cookie is cleared server-side either way */ }
  api.setSessionKey('');
  showSignIn('You are signed out.');
}

function showSignIn(message, oidc) {
  if (cleanup) { try { cleanup(); } catch { /* ignore */ } cleanup = null; }
  session = null;
  api.setCSRF('');
  const token = h('input', { type: 'password', name: 'token', autocomplete: 'off', required: true, spellcheck: 'false' });
  const err = h('p', { class: 'error', role: 'alert', id: 'signin-error' });
  // method and action keep the token out of any URL should a browser ever
  // submit the form without this script (the endpoint refuses a form body).
  const form = h('form', { id: 'signin', class: 'card narrow', method: 'post', action: '/console/api/session', onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = '';
    try {
      const s = await api.call('POST', '/console/api/session', { token: token.value.trim() });
      token.value = '';
      api.setSessionKey(s.session_key);
      start(s);
    } catch (e) {
      err.textContent = e.status === 401 ? 'That is not a valid owner token.' : 'Sign-in failed: ' + e.message;
    }
  } },
  h('h1', {}, 'Sign in to Countersign'),
  message ? h('p', { class: 'notice', id: 'signin-message' }, message) : null,
  field('Owner token', token),
  h('p', { class: 'hint' }, 'An owner token starts with cso_. Agent credentials (csk_) cannot sign in.'),
  h('button', { type: 'submit' }, 'Sign in'),
  err,
  oidc ? h('p', {}, h('button', { type: 'button', class: 'secondary', id: 'sso', onclick: async () => {
    err.textContent = '';
    try {
      await api.startOIDCSignIn();
    } catch (e) {
      err.textContent = 'Could not start the sign-in: ' + e.message;
    }
  } }, 'Sign in with your identity provider')) : null);
  replace(app, form);
  token.focus();
}

function start(s) {
  session = s;
  api.setCSRF(s.csrf_token);
  replace(app, shell());
  if (!location.hash) history.replaceState(null, '', '#/approvals');
  route();
}

async function boot() {
  // Before anything reads location.hash (the router): an OIDC sign-in's
  // key half arrives in the fragment, which this removes at once.
  const offered = api.takeSessionKeyFromURL().catch(() => ''); // no key it cannot check
  api.whenSignedOut((msg) => {
    api.setSessionKey(''); // the session has ended: its key half is worth nothing
    showSignIn(msg, session ? session.oidc_enabled : false);
  });
  window.addEventListener('hashchange', route);
  try {
    await loadCurrencies();
  } catch (e) {
    replace(app, h('p', { class: 'error', role: 'alert' }, 'The console could not load: ' + e.message));
    return;
  }
  const key = await offered;
  let s = null;
  let oidc = false;
  let refused = false;
  try {
    s = await api.get('/console/api/session');
  } catch (e) {
    oidc = !!(e.body && e.body.oidc_enabled);
    refused = e.status === 401; // a 503 says nothing of the kept key
  }
  // A key from this tab's own OIDC sign-in, only in place of a kept key
  // the server refuses, and only once the server accepts it.
  if (!s && refused && key) {
    try {
      s = await api.sessionWith(key);
      api.setSessionKey(key);
    } catch { /* the kept key is judged by its own answer alone */ }
  }
  if (!s && refused) api.setSessionKey(''); // kept only while its session lives
  if (s && s.csrf_token) start(s);
  else showSignIn('', oidc);
}

boot();
