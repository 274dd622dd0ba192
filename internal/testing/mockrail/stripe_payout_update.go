package mockrail

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// A Stripe payout is pending until it arrives: a scheduled payment. Stripe
// lets a pending payout be cancelled, and its update takes metadata only
// (its destination, amount and date cannot change), so redirecting a
// scheduled payout is cancel-and-recreate.

// stripeUpdatePayout: POST /v1/payouts/{id}, metadata only; any other
// parameter (destination, amount) is refused as unknown, as Stripe does.
func (s *Server) stripeUpdatePayout(c *call) {
	form, ok := c.stripeParams("metadata[", "expand[")
	if !ok {
		return
	}
	md, ok := c.stripeMetadata(form)
	if !ok {
		return
	}
	id := c.r.PathValue("id")
	c.serve(op{class: classCreate, kind: KindPayout, fingerprint: stripeFingerprint(c.r, form), run: func(st *state, _ time.Time, _ time.Duration) result {
		return s.changePayoutLocked(st, c, id, func(po *stripePayout) (result, bool) {
			for k, v := range md {
				if v == "" {
					delete(po.Metadata, k) // Stripe: an empty value unsets the key
				} else {
					po.Metadata[k] = v
				}
			}
			return result{}, true
		})
	}})
}

// stripeCancelPayout: POST /v1/payouts/{id}/cancel, pending payouts only;
// the cancellation is journaled (KindPayoutCancel): the payout's money
// never leaves.
func (s *Server) stripeCancelPayout(c *call) {
	form, ok := c.stripeParams("expand[")
	if !ok {
		return
	}
	id := c.r.PathValue("id")
	c.serve(op{class: classCreate, kind: KindPayout, fingerprint: stripeFingerprint(c.r, form), run: func(st *state, now time.Time, _ time.Duration) result {
		return s.changePayoutLocked(st, c, id, func(po *stripePayout) (result, bool) {
			if po.Status != "pending" {
				return result{resp: stripeRequestErr(http.StatusBadRequest, "payout_not_cancelable", "",
					fmt.Sprintf("Payout %s cannot be canceled because its status is %s.", id, po.Status)), outcome: OutcomeRejected}, false
			}
			po.Status = "canceled"
			st.effects = append(st.effects, Effect{Seq: len(st.effects) + 1, Time: now, Rail: Stripe, Account: c.acct.Name,
				ConnectedAccount: c.connected, Kind: KindPayoutCancel, EntityID: id, IdempotencyKey: c.key,
				Subject: id, Amount: po.Amount, Currency: po.Currency})
			return result{}, true
		})
	}})
}

// changePayoutLocked applies change to a payout's body and saves it.
func (s *Server) changePayoutLocked(st *state, c *call, id string, change func(*stripePayout) (result, bool)) result {
	e := st.byID[id]
	if e == nil || e.account != c.scope() || e.kind != KindPayout {
		return c.notFoundEntity("id", "payout", id)
	}
	var po stripePayout
	if err := json.Unmarshal(e.body, &po); err != nil {
		panic(fmt.Sprintf("mockrail: payout %s body: %v", id, err))
	}
	if po.Metadata == nil {
		po.Metadata = map[string]string{}
	}
	if res, ok := change(&po); !ok {
		return res
	}
	e.body, e.status = mustJSON(po), po.Status
	return result{resp: response{http.StatusOK, e.body}, outcome: OutcomeApplied, entityID: id}
}
