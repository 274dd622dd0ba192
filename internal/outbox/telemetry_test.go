package outbox

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestPassWithDeliveriesIsOneSpan: a pass that claims deliveries is an
// outbox.batch span (with the ledger's statements under it when the store
// traces them); an idle pass records nothing.
func TestPassWithDeliveriesIsOneSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	rc := newReceiver(t, always(204))
	f := newFixture(t, rc)
	f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-1", Tracer: tp}
	for range 2 { // the second pass finds nothing
		if _, _, _, err := d.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "outbox.batch" {
		t.Fatalf("spans %v, want one outbox.batch", spans)
	}
	got := map[string]int64{}
	for _, kv := range spans[0].Attributes {
		got[string(kv.Key)] = kv.Value.AsInt64()
	}
	if got["countersign.outbox.claimed"] != 1 || got["countersign.outbox.delivered"] != 1 {
		t.Fatalf("outbox.batch attributes %v", got)
	}
}
