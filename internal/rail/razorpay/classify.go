package razorpay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// entityOf is the "entity" each action creates.
var entityOf = map[sik.Kind]string{
	sik.KindRefund: "refund",
	sik.KindPayout: "payout",
}

// created is the part of a refund/payout Classify and Find read.
type created struct {
	ID            string          `json:"id"`
	Entity        string          `json:"entity"`
	Amount        *int64          `json:"amount"`
	Currency      string          `json:"currency"`
	Status        string          `json:"status"`
	CreatedAt     int64           `json:"created_at"`
	Notes         json.RawMessage `json:"notes"`
	PaymentID     string          `json:"payment_id"`
	FundAccountID string          `json:"fund_account_id"`
	Fees          *int64          `json:"fees"`
}

// stamp returns notes.countersign_sik, "" when absent (notes may be []).
func (c created) stamp() string {
	if !bytes.HasPrefix(bytes.TrimSpace(c.Notes), []byte("{")) {
		return ""
	}
	var notes map[string]any
	if json.Unmarshal(c.Notes, &notes) != nil {
		return ""
	}
	s, _ := notes[sik.StampKey].(string)
	return s
}

// Classify implements rail.Adapter (DESIGN.md §4). Anything it cannot read
// with certainty is Ambiguous, for the reconciler to settle.
func (adapter) Classify(a rail.Action, resp rail.Response) rail.Classification {
	switch {
	case resp.TransportErr != nil:
		return ambiguous("no answer from Razorpay: %s", text(resp.TransportErr.Error()))
	case resp.Status == 0:
		return ambiguous("no answer from Razorpay")
	}
	if err := rail.AnswerEncoding(resp.Headers); err != nil {
		// Not even a refusal can be read: whether it said "nothing was
		// done" or GATEWAY_ERROR (the bank call may have gone through) is
		// unknown.
		return ambiguous("Razorpay answered %d %s", resp.Status, text(err.Error()))
	}
	switch {
	case resp.Status >= 200 && resp.Status <= 299:
		return classifyCreated(a, resp)
	case resp.Status >= 500:
		return ambiguous("Razorpay answered %d: %s", resp.Status, text(errorMessage(resp.Body)))
	}
	e, readErr := readError(resp.Body)
	var code, desc string
	if readErr == nil {
		code, desc = e.Code, e.Description
	}
	reason := func(what string) string {
		if desc == "" {
			return fmt.Sprintf("Razorpay answered %d (%s)", resp.Status, what)
		}
		return fmt.Sprintf("Razorpay answered %d: %s", resp.Status, text(desc))
	}
	switch {
	case resp.Status >= 400 && isKeyMismatch(desc):
		return rail.Classification{Outcome: rail.FingerprintMismatch, Reason: reason("idempotency key reused with another request")}
	case resp.Status == http.StatusConflict:
		// Safe on the status alone: the same key is sent again.
		return rail.Classification{Outcome: rail.InProgress, Reason: reason("request with this idempotency key in progress")}
	case code == "GATEWAY_ERROR" || code == "SERVER_ERROR":
		// A bank or Razorpay failure reported with a 4xx: not a definite
		// rejection of the request.
		return ambiguous("Razorpay answered %d %s: %s", resp.Status, code, text(desc))
	}
	switch resp.Status {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusForbidden, http.StatusNotFound,
		http.StatusUnauthorized, http.StatusTooManyRequests:
		if readErr != nil {
			// A definite rejection is read only from Razorpay's own error:
			// an unreadable body, a proxy's page or another shape may
			// stand for an answer that was no rejection (a GATEWAY_ERROR,
			// a timeout a gateway rewrote).
			return ambiguous("Razorpay answered %d but %s: a refusal Countersign cannot read is no proof that nothing was applied", resp.Status, text(readErr.Error()))
		}
	}
	switch resp.Status {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusForbidden, http.StatusNotFound:
		return rail.Classification{Outcome: rail.Rejected, Reason: reason("rejected")}
	case http.StatusUnauthorized, http.StatusTooManyRequests:
		// Refused before the idempotency layer ran: nothing was applied.
		return rail.Classification{Outcome: rail.Rejected, Reason: reason("refused before processing")}
	}
	return ambiguous("Razorpay answered an unexpected %d: %s", resp.Status, text(errorMessage(resp.Body)))
}

// isKeyMismatch recognises Razorpay's "Different request with the same
// idempotency key has already been processed." and close wordings of it.
func isKeyMismatch(desc string) bool {
	d := strings.ToLower(desc)
	if !strings.Contains(d, "idempotency") {
		return false
	}
	for _, s := range []string{"different request", "different payload", "mismatch", "does not match", "doesn't match"} {
		if strings.Contains(d, s) {
			return true
		}
	}
	return false
}

// rzpErrorDetail is rzpError's inner object.
type rzpErrorDetail = struct {
	Code        string `json:"code"`
	Description string `json:"description"`
	Reason      string `json:"reason"`
}

// readError reads Razorpay's error body, {"error":{"code":…,
// "description":…,…}}: strictly (rail.DecodeAnswer), and only with the
// code and description every Razorpay error carries.
func readError(body []byte) (rzpErrorDetail, error) {
	var e rzpError
	if err := rail.DecodeAnswer(body, &e); err != nil {
		return rzpErrorDetail{}, err
	}
	if e.Error == nil || e.Error.Code == "" || e.Error.Description == "" {
		return rzpErrorDetail{}, errors.New("the body is not Razorpay's error (no error.code and error.description)")
	}
	return *e.Error, nil
}

// text renders what Razorpay (or a proxy, or the network) wrote for a
// reason. A reason becomes the intent's and leaves in the signed
// intent.failed and intent.quarantined webhooks, and a rail's error may
// echo the agent's request (a metadata key, a description): no markup,
// link or line break of it may reach the owner's systems (inert.Text).
// Errors are rendered whole: they quote the body's member names.
func text(s string) string { return inert.Text(s) }

func ambiguous(format string, args ...any) rail.Classification {
	return rail.Classification{Outcome: rail.Ambiguous, Reason: fmt.Sprintf(format, args...)}
}

// classifyCreated reads a 2xx: Applied only when the body is the entity
// this action creates (entity, id, subject, amount, currency); anything
// else is Ambiguous.
func classifyCreated(a rail.Action, resp rail.Response) rail.Classification {
	want := entityOf[a.Kind]
	var c created
	if err := rail.DecodeAnswer(resp.Body, &c); err != nil {
		return ambiguous("Razorpay answered %d with an unreadable body: %s", resp.Status, text(err.Error()))
	}
	if err := c.Matches(a, want); err != nil {
		return ambiguous("Razorpay answered %d but %s", resp.Status, text(err.Error()))
	}
	cl := rail.Classification{
		Outcome:  rail.Applied,
		EntityID: c.ID,
		Reason:   fmt.Sprintf("Razorpay created %s %s (status %s)", want, text(c.ID), text(c.Status)),
		Stamp:    c.stamp(),
	}
	if a.Kind == sik.KindPayout && c.Fees != nil && *c.Fees > 0 {
		cl.FeeMinor = *c.Fees // fees includes tax (GST)
	}
	return cl
}

func (c created) Matches(a rail.Action, want string) error {
	switch {
	case want == "":
		return fmt.Errorf("a %q action is not a Razorpay action", a.Kind)
	case c.Entity != want:
		return fmt.Errorf("the body is a %q, not a %s", c.Entity, want)
	case c.ID == "":
		return fmt.Errorf("the %s has no id", want)
	case c.Amount == nil:
		return fmt.Errorf("the %s %s has no amount", want, c.ID)
	case a.AmountMinor != nil && *c.Amount != *a.AmountMinor:
		return fmt.Errorf("the %s %s is for %d, the request for %d", want, c.ID, *c.Amount, *a.AmountMinor)
	case a.Currency != "" && !strings.EqualFold(c.Currency, a.Currency):
		return fmt.Errorf("the %s %s is in %q, the request in %s", want, c.ID, c.Currency, a.Currency)
	case a.Kind == sik.KindRefund && c.PaymentID != a.Subject:
		return fmt.Errorf("refund %s is for payment %q, not %s", c.ID, c.PaymentID, a.Subject)
	case a.Kind == sik.KindPayout && c.FundAccountID != a.Subject:
		return fmt.Errorf("payout %s goes to %q, not %s", c.ID, c.FundAccountID, a.Subject)
	}
	return nil
}
