// api.js is the console's only way to the server: the owner REST API
// (/v1/…) and the sign-in endpoints (/console/api/…). A session is two
// halves: an HttpOnly cookie the script never sees, and a key the server
// gives this page alone (in the sign-in answer, or the URL fragment after
// an OIDC sign-in). Browsers send the cookie to every port of the host,
// the agent's pages included; the key stays in this origin's localStorage
// (origins include the port), so it survives reloads and new tabs of the
// console and no other page can read it. Every request carries the key in
// X-Countersign-Session-Key; every state-changing one also carries the
// session's CSRF token in X-Countersign-CSRF.

let csrf = '';
let onSignedOut = () => {};
const keyItem = 'countersign_session_key';
let memoryKey = ''; // only where localStorage is refused (then this tab alone is signed in)

export function setCSRF(token) { csrf = token || ''; }
export function whenSignedOut(fn) { onSignedOut = fn; }

// setSessionKey keeps the session's key half ('' forgets it).
export function setSessionKey(key) {
  memoryKey = key || '';
  try {
    if (memoryKey) localStorage.setItem(keyItem, memoryKey);
    else localStorage.removeItem(keyItem);
  } catch { /* storage refused: memoryKey serves this tab */ }
}

// sessionKey is the kept key half, read afresh on every request: a sign-in
// or sign-out in another tab of the console changes it for this one too.
function sessionKey() {
  try { return localStorage.getItem(keyItem) || ''; } catch { return memoryKey; }
}

// An OIDC sign-in is bound to the tab that starts it. The tab keeps a
// random value in its sessionStorage (this origin's, this tab's alone) and
// sends its SHA-256 to /console/oidc/start, which seals it in the sign-in
// cookie; the callback hands it back beside the key. A page of another
// port can send this tab to /console/#session_key=… with a session of its
// own choosing, but not with this tab's binding.
const bindingItem = 'countersign_signin_binding';

function hex(bytes) { return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join(''); }

async function sha256Hex(s) {
  return hex(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(s))));
}

// startOIDCSignIn sends this tab to the issuer through /console/oidc/start,
// bound to it. It throws, and goes nowhere, where sessionStorage is refused.
export async function startOIDCSignIn() {
  const value = hex(crypto.getRandomValues(new Uint8Array(32)));
  sessionStorage.setItem(bindingItem, value);
  location.assign('/console/oidc/start?binding=' + await sha256Hex(value));
}

// takeSessionKeyFromURL removes an OIDC sign-in's fragment
// (#session_key=…&binding=…) from the address bar and this history entry
// at once, before its first await, and forgets this tab's binding. It
// resolves to the key if the fragment carries this tab's own binding, and
// to '' otherwise: a key this tab did not ask for is never kept. The
// caller still keeps it only if the server accepts it and not in place
// of a key the server accepts.
export async function takeSessionKeyFromURL() {
  if (!location.hash.startsWith('#session_key=')) return '';
  const m = /^#session_key=([a-z2-7]{52})&binding=([0-9a-f]{64})$/.exec(location.hash);
  history.replaceState(null, '', location.pathname + location.search);
  let own = '';
  try {
    own = sessionStorage.getItem(bindingItem) || '';
    sessionStorage.removeItem(bindingItem);
  } catch { /* storage refused: no sign-in was started here */ }
  if (!m || !/^[0-9a-f]{64}$/.test(own)) return '';
  return (await sha256Hex(own)) === m[2] ? m[1] : '';
}

function withKey(headers, key = sessionKey()) {
  if (key) headers['X-Countersign-Session-Key'] = key;
  return headers;
}

export class APIError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function messageOf(status, body) {
  if (body && typeof body === 'object') {
    if (body.message) return body.message;
    if (typeof body.error === 'string') return body.error;
    if (body.error && body.error.message) return body.error.message;
  }
  return 'HTTP ' + status;
}

// call sends one request. body, if given, is sent as JSON; key, if given,
// is sent instead of the kept key half.
export async function call(method, path, body, key) {
  const headers = withKey({ 'Accept': 'application/json' }, key || sessionKey());
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET' && method !== 'HEAD') headers['X-Countersign-CSRF'] = csrf;
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  let data = null;
  const text = await r.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = { message: text }; }
  }
  if (r.status === 401 && !path.startsWith('/console/api/session')) {
    onSignedOut('Your session has ended. Sign in again.');
  }
  if (!r.ok) throw new APIError(r.status, messageOf(r.status, data), data);
  return data || {};
}

export const get = (path) => call('GET', path);
export const post = (path, body) => call('POST', path, body ?? {});
export const del = (path) => call('DELETE', path);
// sessionWith asks whom key (with this browser's cookie) signs in, without
// keeping it.
export const sessionWith = (key) => call('GET', '/console/api/session', undefined, key);

// q builds a query string from the set members of params.
export function q(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    if (Array.isArray(v)) v.forEach(x => u.append(k, x));
    else u.append(k, String(v));
  }
  const s = u.toString();
  return s ? '?' + s : '';
}

export const seg = encodeURIComponent;

// watch follows a server stream of the owner API (GET /v1/approvals:watch,
// /v1/intents:watch; grpc-gateway writes one JSON object per line) and
// calls onEvent with each message. It reconnects after a dropped stream,
// with backoff, until stop() is called. onState receives 'live' or
// 'reconnecting'.
export function watch(path, onEvent, onState = () => {}) {
  let stopped = false;
  let ctrl = null;
  let backoff = 500;
  async function run() {
    while (!stopped) {
      ctrl = new AbortController();
      try {
        const r = await fetch(path, {
          credentials: 'same-origin', cache: 'no-store', signal: ctrl.signal,
          headers: withKey({ 'Accept': 'application/json' }),
        });
        if (r.status === 401) { onSignedOut('Your session has ended. Sign in again.'); return; }
        if (!r.ok || !r.body) throw new Error('HTTP ' + r.status);
        onState('live');
        backoff = 500;
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (!line) continue;
            let msg;
            try { msg = JSON.parse(line); } catch { continue; }
            if (msg.error) throw new Error(messageOf(0, msg));
            onEvent(msg.result || msg);
          }
        }
      } catch (e) {
        if (stopped) return;
      }
      if (stopped) return;
      onState('reconnecting');
      await new Promise(res => setTimeout(res, backoff));
      backoff = Math.min(backoff * 2, 10000);
    }
  }
  run();
  return { stop() { stopped = true; if (ctrl) ctrl.abort(); } };
}
