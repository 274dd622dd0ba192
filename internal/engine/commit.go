package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// ErrUnknownAccount means a commit names a rail account that is not
// configured.
var ErrUnknownAccount = errors.New("engine: unknown rail account")

// Commit classifies the rail's answer to an allowed attempt with the rail's
// adapter and records it. It is what ext_proc runs on the response path and
// what the native Commit RPC runs for SDKs.
func (e *Engine) Commit(ctx context.Context, ref IntentRef, resp rail.Response) (ledger.Intent, rail.Classification, error) {
	var acct interface {
		Classify(rail.Action, rail.Response) rail.Classification
	}
	if e.opts.Rails != nil {
		if a, ok := e.opts.Rails.ByID(ref.RailAccount); ok {
			acct = a.Adapter
		}
	}
	if acct == nil {
		return ledger.Intent{}, rail.Classification{}, fmt.Errorf("%w %q", ErrUnknownAccount, ref.RailAccount)
	}
	key := ledger.Key{RailAccount: ref.RailAccount, SIK: ref.SIK}
	it, attempts, err := e.ledger.GetIntent(ctx, key)
	if err != nil {
		return ledger.Intent{}, rail.Classification{}, err
	}
	if ref.BodyStamped && ref.BodyValue == "" {
		// A native caller says it sent the body stamp: it is the attempt's.
		for _, at := range attempts {
			if at.Seq == ref.AttemptSeq {
				ref.BodyValue = at.Stamp
			}
		}
	}
	a, err := ActionOf(it)
	if err != nil {
		return ledger.Intent{}, rail.Classification{}, err
	}
	c := acct.Classify(a, resp)
	if ref.BodyStamped {
		// A 2xx carrying another entity's stamp is not this request's.
		c = c.CheckStamp(ref.BodyValue)
	}
	r := ledger.AttemptResult{Key: key, Seq: ref.AttemptSeq, EntityID: c.EntityID, FeeMinor: c.FeeMinor,
		Reason: c.Reason, ReconcileDelay: e.opts.ReconcileDelay, BodyStamped: ref.BodyStamped}
	if resp.Status != 0 {
		r.Response = &ledger.HTTPMessage{Status: resp.Status, Headers: maps.Clone(resp.Headers), Body: resp.Body}
	}
	if resp.TransportErr != nil {
		r.TransportError = resp.TransportErr.Error()
	}
	switch c.Outcome {
	case rail.Applied:
		r.Outcome = ledger.OutcomeApplied
	case rail.InProgress:
		r.Outcome = ledger.OutcomeInProgress
	case rail.FingerprintMismatch:
		r.Outcome = ledger.OutcomeFingerprintMismatch
	case rail.Rejected:
		r.Outcome = ledger.OutcomeRejected
	default:
		// Anything the adapter could not classify is ambiguous: reconcile,
		// never guess.
		r.Outcome = ledger.OutcomeAmbiguous
	}
	out, err := e.ledger.Commit(ctx, r)
	return out, c, err
}

// ActionOf rebuilds the rail action an intent stands for from its row and
// canonical form, for classifying the rail's answer and for listing. A full
// refund has no amount: the rail refunded whatever was left.
func ActionOf(it ledger.Intent) (rail.Action, error) {
	var k sik.Action
	if err := json.Unmarshal([]byte(it.Canonical), &k); err != nil {
		return rail.Action{}, fmt.Errorf("intent %s: canonical form: %w", it.Key, err)
	}
	a := rail.Action{Kind: sik.Kind(it.Action), Subject: it.Subject, Currency: it.Currency, Payee: it.Payee,
		Extra: maps.Clone(k.Extra), Distinct: k.Distinct}
	if a.Extra["amount"] == "full" {
		delete(a.Extra, "amount")
	} else {
		amount := it.AmountMinor
		a.AmountMinor = &amount
	}
	return a, nil
}

// MarkStamped records that the attempt's request body now carries its
// stamp; ext_proc calls it before letting the request leave.
func (e *Engine) MarkStamped(ctx context.Context, ref IntentRef) error {
	return e.ledger.MarkBodyStamped(ctx, ledger.Key{RailAccount: ref.RailAccount, SIK: ref.SIK}, ref.AttemptSeq)
}
