package mockrail

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// stripeCapture captures an uncaptured payment (status requires_capture):
// POST /v1/payment_intents/{id}/capture takes amount_to_capture, POST
// /v1/charges/{id}/capture takes amount; absent, the whole amount. The rest
// of a partial capture is released, as Stripe does. The capture is an
// effect: money taken from the customer.
func (s *Server) stripeCapture(amountParam string) railHandler {
	return func(c *call) {
		form, ok := c.stripeParams(amountParam, "metadata[", "statement_descriptor", "expand[")
		if !ok {
			return
		}
		if _, ok := c.stripeExpand(form); !ok {
			return
		}
		amount, hasAmount, ok := c.stripeAmount(form, amountParam, false)
		if !ok {
			return
		}
		md, ok := c.stripeMetadata(form)
		if !ok {
			return
		}
		id := c.r.PathValue("id")
		isPI := strings.HasPrefix(c.r.URL.Path, "/v1/payment_intents/")
		c.serve(op{class: classCreate, kind: KindPayment, fingerprint: stripeFingerprint(c.r, form), run: func(st *state, now time.Time, _ time.Duration) result {
			p := st.lookupPayment(c.scope(), id)
			if p == nil || isPI && p.piID != id || !isPI && p.chargeID != id {
				what := map[bool]string{true: "payment_intent", false: "charge"}[isPI]
				return result{resp: stripeRequestErr(http.StatusNotFound, "resource_missing", "id", fmt.Sprintf("No such %s: '%s'", what, id)), outcome: OutcomeRejected}
			}
			if p.status != "requires_capture" {
				return result{resp: stripeRequestErr(http.StatusBadRequest, "payment_intent_unexpected_state", "",
					fmt.Sprintf("This PaymentIntent could not be captured because it has a status of %s. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.", p.status)), outcome: OutcomeRejected}
			}
			amt := p.amount
			if hasAmount {
				amt = amount
			}
			if amt > p.amount {
				return result{resp: stripeRequestErr(http.StatusBadRequest, "amount_too_large", amountParam,
					fmt.Sprintf("The amount to capture (%d %s) is greater than the amount capturable (%d %s).", amt, p.currency, p.amount, p.currency)), outcome: OutcomeRejected}
			}
			p.status = "succeeded"
			if amt < p.amount {
				p.captured = amt
			}
			body := s.renderPayment(p)
			if !isPI {
				body = mustJSON(stripeChargeOf(p))
			}
			st.addEntity(&entity{rail: Stripe, account: c.scope(), kind: KindCapture, id: s.newID("cap_"), created: now, body: body, pay: p, status: "succeeded"},
				Effect{Time: now, Rail: Stripe, Account: c.acct.Name, ConnectedAccount: c.connected, Kind: KindCapture, EntityID: p.id,
					IdempotencyKey: c.key, Subject: p.id, Amount: amt, Currency: p.currency, Metadata: cloneMap(md)})
			return result{resp: response{http.StatusOK, body}, outcome: OutcomeApplied, entityID: p.id}
		}})
	}
}
