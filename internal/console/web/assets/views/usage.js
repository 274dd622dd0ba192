// usage.js draws a mandate's usage against each budget and window as bars
// (spent, held, free) with the next reset. Bar widths are set through the
// CSSOM, which the Content-Security-Policy allows (no style attributes).
import { h, when } from '../dom.js';

// duration writes a protobuf JSON duration ("3600s") as "1h", "15m", "1d".
function duration(d) {
  const s = parseFloat(String(d || '0s'));
  if (!(s > 0)) return String(d || '');
  if (s % 86400 === 0) return s / 86400 + 'd';
  if (s % 3600 === 0) return s / 3600 + 'h';
  if (s % 60 === 0) return s / 60 + 'm';
  return s + 's';
}
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
  if (u.feeBudget && u.feeBudget.limit) {
    const f = u.feeBudget, cur = f.limit.currency, lim = f.limit.amountMinor;
    rows.push(h('div', { class: 'usage fee' },
      h('p', {}, h('strong', {}, 'Fee budget ', cur), ' — ', formatMinor(f.freeMinor, cur, rail), ' free of ', formatMinor(lim, cur, rail)),
      bar(`Fee budget ${cur}: ${formatMinor(f.spentMinor, cur, rail)} spent of ${formatMinor(lim, cur, rail)}`, f.spentMinor, 0, lim)));
  }
  for (const w of u.windows || []) {
    const scope = w.scope === 'WINDOW_SCOPE_PAYEE' ? 'per payee' : 'per agent';
    const title = `Window ${Number(w.windowIndex || 0) + 1} (${duration(w.duration)}, ${scope}${w.key && w.scope === 'WINDOW_SCOPE_PAYEE' ? ' ' + w.key : ''})`;
    const parts = [h('p', {}, h('strong', {}, title))];
    if (w.maxCalls) {
      const label = `${title}: ${w.calls || 0} of ${w.maxCalls} calls`;
      parts.push(h('p', { class: 'hint' }, `${w.calls || 0} of ${w.maxCalls} calls`), bar(label, w.calls || 0, 0, w.maxCalls));
    }
    if (w.maxAmount && w.maxAmount.currency) {
      const cur = w.maxAmount.currency;
      const used = (w.amount && w.amount.amountMinor) || '0';
      const label = `${title}: ${formatMinor(used, cur, rail)} of ${formatMinor(w.maxAmount.amountMinor, cur, rail)}`;
      parts.push(h('p', { class: 'hint' }, `${formatMinor(used, cur, rail)} of ${formatMinor(w.maxAmount.amountMinor, cur, rail)}`), bar(label, used, 0, w.maxAmount.amountMinor));
    }
    parts.push(h('p', { class: 'hint' }, w.nextReleaseTime
      ? ['Frees up ', when(w.nextReleaseTime), ' (the oldest counted use leaves the window)']
      : 'Nothing counted in the window now.'));
    rows.push(h('div', { class: 'usage window' }, parts));
  }
  if (u.windowsTruncated) rows.push(h('p', { class: 'hint' }, 'Only the busiest payees are shown.'));
  if (!rows.length) return h('p', { class: 'hint' }, 'This mandate sets no budget or window.');
  return h('div', { class: 'usage-list' }, rows);
}
