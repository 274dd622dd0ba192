package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// objectOf is the "object" of the entity each action creates.
var objectOf = map[sik.Kind]string{
	sik.KindRefund:   "refund",
	sik.KindPayout:   "payout",
	sik.KindTransfer: "transfer",
}

// created is the part of a refund/payout/transfer Classify and Find read.
type created struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	Amount             *int64          `json:"amount"`
	Currency           string          `json:"currency"`
	Status             string          `json:"status"`
	Created            int64           `json:"created"`
	Metadata           json.RawMessage `json:"metadata"`
	PaymentIntent      expandable      `json:"payment_intent"`
	Charge             expandable      `json:"charge"`
	Destination        expandable      `json:"destination"`
	BalanceTransaction expandable      `json:"balance_transaction"`
}

// stamp returns metadata.countersign_sik, "" when absent.
func (c created) stamp() string {
	var md map[string]any
	if json.Unmarshal(c.Metadata, &md) != nil {
		return ""
	}
	s, _ := md[sik.StampKey].(string)
	return s
}

// Classify implements rail.Adapter (DESIGN.md §4). Anything it cannot read
// with certainty is Ambiguous: the reconciler settles it; a guess of
// "applied" or "rejected" could lose or double money.
func (adapter) Classify(a rail.Action, resp rail.Response) rail.Classification {
	switch {
	case resp.TransportErr != nil:
		return ambiguous("no answer from Stripe: %s", text(resp.TransportErr.Error()))
	case resp.Status == 0:
		return ambiguous("no answer from Stripe")
	}
	if err := rail.AnswerEncoding(resp.Headers); err != nil {
		// Not even a refusal can be read: whether it said "nothing was
		// done" or "idempotency_error" is unknown.
		return ambiguous("Stripe answered %d %s", resp.Status, text(err.Error()))
	}
	switch {
	case resp.Status >= 200 && resp.Status <= 299:
		return classifyCreated(a, resp)
	case resp.Status >= 500:
		// Stripe saves a 5xx under the key, but the work may have run.
		return ambiguous("Stripe answered %d: %s", resp.Status, text(errorMessage(resp.Body)))
	}
	e, readErr := readError(resp.Body)
	var typ, code, msg string
	if readErr == nil {
		typ, code, msg = e.Type, e.Code, e.Message
	}
	reason := func(what string) string {
		if msg == "" {
			return fmt.Sprintf("Stripe answered %d (%s)", resp.Status, what)
		}
		return fmt.Sprintf("Stripe answered %d: %s", resp.Status, text(msg))
	}
	switch {
	case resp.Status >= 400 && typ == "idempotency_error":
		return rail.Classification{Outcome: rail.FingerprintMismatch, Reason: reason("idempotency_error")}
	case resp.Status == http.StatusConflict || code == "idempotency_key_in_use":
		// Safe on the status alone: the same key is sent again.
		return rail.Classification{Outcome: rail.InProgress, Reason: reason("idempotency key in use")}
	}
	switch resp.Status {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusNotFound, http.StatusForbidden,
		http.StatusUnauthorized, http.StatusTooManyRequests:
		if readErr != nil {
			// A definite rejection is read only from Stripe's own error: an
			// unreadable body, a proxy's page or another shape may stand
			// for an answer that was no rejection (an idempotency_error, a
			// timeout a gateway rewrote).
			return ambiguous("Stripe answered %d but %s: a refusal Countersign cannot read is no proof that nothing was applied", resp.Status, text(readErr.Error()))
		}
	}
	switch resp.Status {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusNotFound, http.StatusForbidden:
		return rail.Classification{Outcome: rail.Rejected, Reason: reason("rejected")}
	case http.StatusUnauthorized, http.StatusTooManyRequests:
		// Refused before the idempotency layer ran: nothing was applied.
		return rail.Classification{Outcome: rail.Rejected, Reason: reason("refused before processing")}
	}
	// 1xx, 3xx and unusual 4xx (408 from a proxy, 422, …): not Stripe's
	// documented answers, so nothing is proven.
	return ambiguous("Stripe answered an unexpected %d: %s", resp.Status, text(errorMessage(resp.Body)))
}

// stripeErrorDetail is stripeError's inner object.
type stripeErrorDetail = struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// readError reads Stripe's error body, {"error":{"type":…,…}}: strictly
// (rail.DecodeAnswer), and only with the type every Stripe error carries.
func readError(body []byte) (stripeErrorDetail, error) {
	var e stripeError
	if err := rail.DecodeAnswer(body, &e); err != nil {
		return stripeErrorDetail{}, err
	}
	if e.Error == nil || e.Error.Type == "" {
		return stripeErrorDetail{}, errors.New("the body is not Stripe's error (no error.type)")
	}
	return *e.Error, nil
}

// text renders what Stripe (or a proxy, or the network) wrote for a
// reason. A reason becomes the intent's and leaves in the signed
// intent.failed and intent.quarantined webhooks, and a rail's error may
// echo the agent's request (a metadata key, a description): no markup,
// link or line break of it may reach the owner's systems (inert.Text).
// Errors are rendered whole: they quote the body's member names.
func text(s string) string { return inert.Text(s) }

func ambiguous(format string, args ...any) rail.Classification {
	return rail.Classification{Outcome: rail.Ambiguous, Reason: fmt.Sprintf(format, args...)}
}

// classifyCreated reads a 2xx. It is Applied only when the body is the
// entity this action creates: the right object, an id, and the subject,
// amount and currency the action names; anything else (an undecodable or
// replayed body) is Ambiguous.
func classifyCreated(a rail.Action, resp rail.Response) rail.Classification {
	want := objectOf[a.Kind]
	var c created
	if err := rail.DecodeAnswer(resp.Body, &c); err != nil {
		return ambiguous("Stripe answered %d with an unreadable body: %s", resp.Status, text(err.Error()))
	}
	if err := c.Matches(a, want); err != nil {
		return ambiguous("Stripe answered %d but %s", resp.Status, text(err.Error()))
	}
	cl := rail.Classification{
		Outcome:  rail.Applied,
		EntityID: c.ID,
		Reason:   fmt.Sprintf("Stripe created %s %s (status %s)", want, text(c.ID), text(c.Status)),
		Stamp:    c.stamp(),
	}
	if a.Kind != sik.KindRefund { // refunds carry no fee
		cl.FeeMinor = balanceTransactionFee(c.BalanceTransaction)
	}
	return cl
}

// matches checks that c is the entity a creates.
func (c created) Matches(a rail.Action, want string) error {
	switch {
	case want == "":
		return fmt.Errorf("a %q action is not a Stripe action", a.Kind)
	case c.Object != want:
		return fmt.Errorf("the body is a %q, not a %s", c.Object, want)
	case c.ID == "":
		return fmt.Errorf("the %s has no id", want)
	case c.Amount == nil:
		return fmt.Errorf("the %s %s has no amount", want, c.ID)
	case a.AmountMinor != nil && *c.Amount != *a.AmountMinor:
		return fmt.Errorf("the %s %s is for %d, the request for %d", want, c.ID, *c.Amount, *a.AmountMinor)
	case a.Currency != "" && !strings.EqualFold(c.Currency, a.Currency):
		return fmt.Errorf("the %s %s is in %q, the request in %s", want, c.ID, c.Currency, a.Currency)
	}
	if a.Kind == sik.KindRefund {
		if a.Subject != c.PaymentIntent.ID && a.Subject != c.Charge.ID {
			return fmt.Errorf("refund %s is for %s/%s, not %s", c.ID, c.PaymentIntent.ID, c.Charge.ID, a.Subject)
		}
	} else if a.Subject != c.Destination.ID {
		return fmt.Errorf("%s %s goes to %q, not %s", want, c.ID, c.Destination.ID, a.Subject)
	}
	return nil
}

// balanceTransactionFee is the fee on an expanded balance_transaction, 0
// when it is not expanded.
func balanceTransactionFee(bt expandable) int64 {
	if bt.Object == nil {
		return 0
	}
	var o struct {
		Fee int64 `json:"fee"`
	}
	if json.Unmarshal(bt.Object, &o) != nil || o.Fee < 0 {
		return 0
	}
	return o.Fee
}
