package mockrail

import "time"

// Journal is what really happened: every rail effect and every rail request.
type Journal struct {
	Effects  []Effect        `json:"effects"`
	Requests []RequestRecord `json:"requests"`
}

// Kind is the kind of entity an effect created.
type Kind string

// Entity kinds. KindPayment is never an effect; it names payment reads.
const (
	KindRefund   Kind = "refund"
	KindPayout   Kind = "payout"
	KindTransfer Kind = "transfer"
	// KindCapture: an uncaptured Stripe payment captured (money taken from
	// the customer); Subject is the payment, Amount what was captured.
	KindCapture Kind = "capture"
	// KindPayoutCancel: a pending payout cancelled; EntityID and Subject
	// are the payout's id, Amount its amount (the money stays).
	KindPayoutCancel Kind = "payout_cancel"
	KindPayment      Kind = "payment"
)

// Effect is one entity the rail really created (whatever the client saw).
type Effect struct {
	Seq     int       `json:"seq"`
	Time    time.Time `json:"time"`
	Rail    Rail      `json:"rail"`
	Account string    `json:"account"`
	// ConnectedAccount is the connected (sub-merchant) account the effect
	// acted on (Stripe-Account, X-Razorpay-Account); "" for the account's own.
	ConnectedAccount string `json:"connected_account,omitempty"`
	Kind             Kind   `json:"kind"`
	EntityID         string `json:"entity_id"`
	IdempotencyKey   string `json:"idempotency_key,omitempty"`
	// Subject is what the effect acts on: for refunds the payment's canonical
	// id (Stripe pi_ when the payment has one, else ch_; Razorpay pay_); for
	// Stripe payouts the destination ("" for the default account), for Stripe
	// transfers the destination account, for RazorpayX payouts the
	// fund_account_id.
	Subject  string            `json:"subject"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Metadata map[string]string `json:"metadata,omitempty"` // Stripe metadata or Razorpay notes
}

// Outcome is how the rail disposed of a request.
type Outcome string

// Request outcomes.
const (
	OutcomeApplied      Outcome = "applied"              // a new entity was created
	OutcomeRejected     Outcome = "rejected"             // business rule refused it (saved under its key)
	OutcomeInvalid      Outcome = "invalid"              // parameter validation failed (not saved)
	OutcomeReplayed     Outcome = "replayed"             // saved idempotent response returned
	OutcomeInProgress   Outcome = "in_progress"          // 409: same key still running
	OutcomeKeyMismatch  Outcome = "idempotency_mismatch" // same key, different parameters
	OutcomeUnauthorized Outcome = "unauthorized"         // 401
	OutcomeRead         Outcome = "read"                 // a GET answered
	OutcomeNotFound     Outcome = "not_found"            // unknown URL or entity
	OutcomeReset        Outcome = "reset"                // connection closed before apply
)

// RequestRecord is one rail request as received.
type RequestRecord struct {
	Seq     int       `json:"seq"`
	Time    time.Time `json:"time"`
	Rail    Rail      `json:"rail,omitempty"`
	Account string    `json:"account,omitempty"` // "" when authentication failed
	// ConnectedAccount is the connected account the request named, if any.
	ConnectedAccount string `json:"connected_account,omitempty"`
	// Credential is the presented credential, masked (first 7 and last 4
	// characters), so a test can tell the agent's credential from the rail key.
	Credential     string `json:"credential,omitempty"`
	Method         string `json:"method"`
	Path           string `json:"path"`
	Query          string `json:"query,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Status is the HTTP status sent, 0 when no response was sent (reset,
	// timeout).
	Status   int     `json:"status"`
	Outcome  Outcome `json:"outcome"`
	EntityID string  `json:"entity_id,omitempty"`
	Fault    Profile `json:"fault,omitempty"`
}

// EffectsOn returns the effects whose subject is subject.
func (j Journal) EffectsOn(subject string) []Effect {
	var out []Effect
	for _, e := range j.Effects {
		if e.Subject == subject {
			out = append(out, e)
		}
	}
	return out
}

// EffectsWithKey returns the effects created under idempotency key key.
func (j Journal) EffectsWithKey(key string) []Effect {
	var out []Effect
	for _, e := range j.Effects {
		if e.IdempotencyKey == key {
			out = append(out, e)
		}
	}
	return out
}

// MaskCredential masks a credential the way the journal records it.
func MaskCredential(c string) string {
	if len(c) <= 12 {
		return "****"
	}
	return c[:7] + "****" + c[len(c)-4:]
}
