package reconcile

import (
	"context"
	"io"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// TestPassWithWorkIsOneSpan: a pass that claims work is a reconcile.batch
// span counting what it did; an idle pass records nothing.
func TestPassWithWorkIsOneSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: &listing{found: rail.Finding{Exhausted: true, Pages: 2}}}
	l := &scripted{work: []ledger.ReconcileWork{{
		Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: "S"}, Action: "refund", Subject: "pi_1", AmountMinor: 5, Currency: "USD", Canonical: `{"extra":{}}`, AttemptCount: 1},
		Attempt: ledger.Attempt{Seq: 1, Stamp: "STAMP", BodyStamped: true},
	}}}
	w := New(l, oneAccount{acct}, Options{Owner: "me", Tracer: tp}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 2 { // the second pass finds nothing
		if _, err := w.Pass(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "reconcile.batch" {
		t.Fatalf("spans %v, want one reconcile.batch", spans)
	}
	got := map[string]int64{}
	for _, kv := range spans[0].Attributes {
		got[string(kv.Key)] = kv.Value.AsInt64()
	}
	if got["countersign.reconcile.claimed"] != 1 || got["countersign.reconcile.absent"] != 1 {
		t.Fatalf("reconcile.batch attributes %v", got)
	}
}
