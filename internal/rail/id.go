package rail

// IsID reports whether s is a plausible rail id or path segment (Stripe
// pi_…, acct_…; Razorpay pay_…, fa_…): 1–255 of [A-Za-z0-9_], so it means
// the same in a rail's paths, its bodies and what an owner is shown.
func IsID(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !IDByte(s[i]) {
			return false
		}
	}
	return true
}

// IDByte reports whether c may appear in a rail id (IsID).
func IDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}
