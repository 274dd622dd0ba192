// usage.js draws a mandate's usage against each budget and window as bars
// (spent, held, free) with the next reset. Bar widths are set through the
// CSSOM, which the Content-Security-Policy allows (no style attributes).
import { h, when } from '../dom.js';
import { formatMinor } from '../money.js';

function pct(part, whole) {
  const p = Number(part), w = Number(whole);
  if (!(w > 0)) return 0;
  return Math.max(0, Math.min(100, (p / w) * 100));
}

function bar(label, spent, held, limit) {
  const s = h('span', { class: 'seg spent' });
  const hd = h('span', { class: 'seg held' });
  s.style.width = pct(spent, limit) + '%';
  hd.style.width = Math.min(pct(held, limit), 100 - pct(spent, limit)) + '%';
  return h('div', { class: 'bar', role: 'img', 'aria-label': label }, s, hd);
}

// usageBars renders a MandateUsage.
export function usageBars(u, rail, opts = {}) {
  const rows = [];
  for (const b of u.budgets || []) {
    const cur = b.currency;
    const label = `Budget ${cur}: ${formatMinor(b.spentMinor, cur, rail)} spent, ${formatMinor(b.heldMinor, cur, rail)} held, ${formatMinor(b.freeMinor, cur, rail)} free of ${formatMinor(b.limitMinor, cur, rail)}`;
    rows.push(h('div', { class: 'usage budget', 'data-currency': cur },
      h('p', {}, h('strong', {}, 'Budget ', cur), ' — ', formatMinor(b.freeMinor, cur, rail), ' free of ', formatMinor(b.limitMinor, cur, rail)),
      bar(label, b.spentMinor, b.heldMinor, b.limitMinor),
      opts.compact ? null : h('p', { class: 'hint' }, formatMinor(b.spentMinor, cur, rail), ' spent · ', formatMinor(b.heldMinor, cur, rail), ' held')));
  }
  if (u.feeBudget) {
    const f = u.feeBudget, cur = f.currency;
    rows.push(h('div', { class: 'usage fee' },
      h('p', {}, h('strong', {}, 'Fee budget ', cur), ' — ', formatMinor(f.freeMinor, cur, rail), ' free of ', formatMinor(f.limitMinor, cur, rail)),
      bar('Fee budget', f.spentMinor, f.heldMinor, f.limitMinor)));
  }
  for (const w of u.windows || []) {
    const isAmount = !!w.currency;
    const fmt = (v) => isAmount ? formatMinor(v, w.currency, rail) : String(v ?? 0) + ' calls';
    const used = w.usedMinor ?? w.used ?? w.usedCount ?? 0;
    const limit = w.limitMinor ?? w.limit ?? w.limitCount ?? 0;
    const title = [w.name || w.kind || 'Window', w.scope ? '(' + w.scope + ')' : '', w.key || ''].filter(Boolean).join(' ');
    rows.push(h('div', { class: 'usage window' },
      h('p', {}, h('strong', {}, title), ' — ', fmt(used), ' of ', fmt(limit), w.length ? ' per ' + w.length : ''),
      bar(title + ': ' + fmt(used) + ' of ' + fmt(limit), used, 0, limit),
      w.nextResetTime ? h('p', { class: 'hint' }, 'Next reset ', when(w.nextResetTime)) : null));
  }
  if (!rows.length) return h('p', { class: 'hint' }, 'This mandate sets no budget or window.');
  return h('div', { class: 'usage-list' }, rows);
}
