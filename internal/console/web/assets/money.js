// money.js writes integer minor units for people, exactly (BigInt, never a
// float): "1,899.00 USD", "5,000 JPY", "5.120 KWD". The exponents come from
// the server (/console/assets/currencies.json, made from internal/money), so
// the console and the refusals the agent reads agree; Stripe's departures
// from ISO 4217 (ISK, MGA) apply to Stripe amounts. A currency with no known
// exponent is never given a guessed decimal point.

let table = { iso4217: {}, stripe: {} };

export async function loadCurrencies() {
  const r = await fetch('/console/assets/currencies.json', { credentials: 'same-origin' });
  if (!r.ok) throw new Error('currency table: HTTP ' + r.status);
  table = await r.json();
}

export function setCurrencies(t) { table = t; }

export function exponent(currency, rail) {
  if (rail === 'RAIL_STRIPE' && table.stripe && currency in table.stripe) return table.stripe[currency];
  if (table.iso4217 && currency in table.iso4217) return table.iso4217[currency];
  return null;
}

// major writes minor (a decimal string or number) with exp fraction digits.
export function major(minor, exp) {
  let v = BigInt(minor);
  const neg = v < 0n;
  if (neg) v = -v;
  let digits = v.toString();
  if (digits.length <= exp) digits = '0'.repeat(exp - digits.length + 1) + digits;
  const whole = digits.slice(0, digits.length - exp);
  const frac = digits.slice(digits.length - exp);
  let out = '';
  for (let i = 0; i < whole.length; i++) {
    if (i > 0 && (whole.length - i) % 3 === 0) out += ',';
    out += whole[i];
  }
  return (neg ? '-' : '') + out + (exp > 0 ? '.' + frac : '');
}

// format writes a Money ({amountMinor, currency}) for people.
export function format(m, rail) {
  if (!m) return '—';
  const minor = m.amountMinor ?? '0';
  const cur = m.currency || '';
  if (!/^-?\d+$/.test(String(minor))) return String(minor) + ' ' + cur;
  const exp = exponent(cur, rail);
  if (exp === null) return cur ? `${minor} minor units of ${cur}` : `${minor} minor units (no currency)`;
  return major(minor, exp) + ' ' + cur;
}

// formatMinor writes a bare minor-unit amount in currency.
export function formatMinor(minor, currency, rail) {
  return format({ amountMinor: String(minor ?? '0'), currency }, rail);
}
