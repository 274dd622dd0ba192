package engine

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// countingAdapter counts the requests its adapter parses.
type countingAdapter struct {
	rail.Adapter
	parses *atomic.Int64
}

func (c countingAdapter) Parse(req rail.Request) (rail.Parsed, error) {
	c.parses.Add(1)
	return c.Adapter.Parse(req)
}

// A request that authentication refuses whatever its body says (no
// credential, one not of a credential's form, a source or credential
// blocked for failing too often) is refused before its body is parsed:
// the parse is work whose size the sender chooses (found by a review: a
// JSON body of 64 KiB cost 360 MB to check, paid by every request of a
// source already refused for its failed credentials).
func TestRefusedSendersBodiesAreNotParsed(t *testing.T) {
	var parses atomic.Int64
	r := newRigOn(t, rigRail{account: "acct_1", rail: sik.RailStripe, host: "api.stripe.com", key: mockrail.DefaultStripeKey,
		adapter:     func() rail.Adapter { return countingAdapter{stripe.New(), &parses} },
		mandateRail: countersignv1.Rail_RAIL_STRIPE, kind: countersignv1.ActionKind_ACTION_KIND_REFUND, currency: "USD",
		payments: []mockrail.Payment{{Rail: mockrail.Stripe, ID: "pi_1", Amount: 100000, Currency: "usd"}}})
	now := time.Now()
	qo := quota.Options{Rate: 0.001, Burst: 3, Now: func() time.Time { return now }}
	opts := r.e.opts
	opts.Failures = quota.NewFailures(qo, qo)
	r.e = New(r.store, opts, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())
	ctx := context.Background()
	send := func(cred, peer string) (Outcome, int64) {
		before := parses.Load()
		req := r.refund()
		req.Credential, req.Peer = cred, peer
		out := r.e.Decide(ctx, req)
		return out, parses.Load() - before
	}
	guess := func() string {
		secret, _, err := credential.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	for _, tc := range []struct{ name, cred, code string }{
		{"no credential", "", ReasonCredentialMissing},
		{"not a credential", "sk_live_123", ReasonCredentialUnknown},
	} {
		if out, n := send(tc.cred, "10.0.0.1"); out.ReasonCode != tc.code || n != 0 {
			t.Fatalf("%s: %s (%s), %d parses; want %s and none", tc.name, out.ReasonCode, out.Reason, n, tc.code)
		}
	}
	// A credential of the right form is looked up, so its request is
	// parsed; once its source has failed too often, no longer.
	for i := range 3 {
		if out, n := send(guess(), "10.0.0.9"); out.ReasonCode != ReasonCredentialUnknown || n != 1 {
			t.Fatalf("guess %d: %s, %d parses; want credential_unknown after one", i, out.ReasonCode, n)
		}
	}
	for i := range 5 {
		if out, n := send(guess(), "10.0.0.9"); out.ReasonCode != ReasonTooManyFailures || out.HTTPStatus != 429 || out.ResponseHeaders["retry-after"] == "" || n != 0 {
			t.Fatalf("blocked guess %d: %s %d, %d parses; want too_many_failures and none", i, out.ReasonCode, out.HTTPStatus, n)
		}
	}
	// The agent's own credential, from a source that has not failed, is
	// decided whole.
	if out, n := send(r.secret, "10.0.0.1"); out.Verdict != Allow || n != 1 {
		t.Fatalf("the agent's refund: %s %s (%s), %d parses; want ALLOW after one", out.Verdict, out.ReasonCode, out.Reason, n)
	}
}
