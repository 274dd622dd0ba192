// dom.js builds elements without ever parsing markup: every string becomes
// a text node, so text an agent controls (reasons, metadata, payee names)
// is inert wherever it is shown. Nothing in the console uses innerHTML.

// h(tag, attrs, ...children) creates an element. attrs values are set as
// properties for on* handlers and as attributes otherwise; children are
// nodes, strings (text), arrays, or null/undefined/false (skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = v;
    } else if (v === true) {
      el.setAttribute(k, '');
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

// invisible matches characters that change how text around them reads,
// or hide text, without being seen: control characters (but tab and
// newline), format characters (bidirectional overrides and isolates,
// zero-width characters, the soft hyphen, tag characters), private-use
// characters, line and paragraph separators, every other default-ignorable
// code point (variation selectors, Hangul fillers), which browsers draw as
// nothing, and every space but the plain one. An agent could use them to
// make "refund of 499.00 USD" read as something else, or to write, after
// "T-77", a card number its owner approves without seeing. The server
// refuses most of them in what it shows (sik.Hidden); the page escapes
// them whatever it is given.
const invisible = /[\p{Cc}\p{Cf}\p{Co}\p{Zl}\p{Zp}\p{Zs}\p{Default_Ignorable_Code_Point}\u2800]/gu;

// visible writes every invisible character as a \u{…} escape.
export function visible(s) {
  return s.replace(invisible, (ch) => (ch === ' ' || ch === '\t' || ch === '\n')
    ? ch : '\\u{' + ch.codePointAt(0).toString(16).toUpperCase() + '}');
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(visible(String(c))));
  }
}

// replace empties el and appends children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// field is a labelled form control.
export function field(label, control) {
  const id = control.id || ('f-' + Math.random().toString(36).slice(2));
  control.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), control);
}

// dl renders [term, value] pairs as a description list.
export function dl(pairs) {
  return h('dl', { class: 'facts' },
    pairs.filter(p => p && p[1] !== undefined && p[1] !== null && p[1] !== '')
      .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// when writes a timestamp for people ("2026-12-01 22:15:03 UTC"), or "—".
export function when(ts) {
  if (!ts) return '—';
  const d = new Date(ts);
  if (isNaN(d)) return String(ts);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

// left writes the time from now until ts ("4m 10s left", "expired").
export function left(ts, now = Date.now()) {
  const ms = new Date(ts).getTime() - now;
  if (isNaN(ms)) return '—';
  if (ms <= 0) return 'expired';
  const s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400), hr = Math.floor((s % 86400) / 3600),
    m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (d > 0) return `${d}d ${hr}h left`;
  if (hr > 0) return `${hr}h ${m}m left`;
  if (m > 0) return `${m}m ${sec}s left`;
  return `${sec}s left`;
}

// enumText turns "INTENT_STATE_IN_FLIGHT" into "in flight" given the prefix.
export function enumText(v, prefix) {
  if (!v) return '—';
  let s = String(v);
  if (prefix && s.startsWith(prefix)) s = s.slice(prefix.length);
  return s.toLowerCase().replaceAll('_', ' ');
}

// status shows a message in the page's live region (read by screen readers).
export function status(msg, kind = 'info') {
  const el = document.getElementById('status');
  if (!el) return;
  el.className = 'status ' + kind;
  el.textContent = msg;
}

// hashQuery returns the parameters after "?" in the location's hash
// ("#/intents?agent=a1" → {agent: "a1"}).
export function hashQuery() {
  const i = location.hash.indexOf('?');
  return i < 0 ? new URLSearchParams() : new URLSearchParams(location.hash.slice(i + 1));
}
