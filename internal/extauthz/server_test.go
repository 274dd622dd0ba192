package extauthz

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/countersign/countersign/internal/engine"
)

// TestCheckSpanQuotesTheRequestWithinBounds: ext_authz.Check's span quotes
// the agent's host and path cut as the decision record cuts them, and
// keeps nothing of its tracestate, however much it sent (a 60 KiB path is
// within Envoy's default header limit).
func TestCheckSpanQuotesTheRequestWithinBounds(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)) // no span limits: the bound is Check's
	defer func() { _ = tp.Shutdown(context.Background()) }()
	var ts []string
	for i := range 32 {
		ts = append(ts, "k"+strings.Repeat("k", 200)+string(rune('a'+i%26))+"="+strings.Repeat("v", 255))
	}
	req := checkRequest(map[string]string{"traceparent": "00-5b8efff798038103d269b633813fc60c-00f067aa0ba902b7-01",
		"tracestate": strings.Join(ts, ",")}, "amount=1", nil)
	http := req.GetAttributes().GetRequest().GetHttp()
	http.Method = strings.Repeat("M", 4<<10)
	http.Host = strings.Repeat("h", 8<<10) + ".example"
	http.Path = "/v1/refunds/" + strings.Repeat("A", 60<<10) + "?q=" + strings.Repeat("q", 1<<10)
	s := NewServer(deciderFunc(func(context.Context, engine.Request) engine.Outcome {
		return engine.Outcome{Verdict: engine.Block, ReasonCode: "x"}
	}), 1<<20).WithTracing(tp)
	if _, err := s.Check(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	sp := spans[0]
	want := map[string]string{
		"http.request.method": engine.BoundedMethod(http.Method), "server.address": engine.BoundedHost(http.Host),
		"url.path": engine.BoundedPath(http.Path),
	}
	total := 0
	for _, kv := range sp.Attributes {
		v := kv.Value.String()
		total += len(v)
		if w, ok := want[string(kv.Key)]; ok && v != w {
			t.Errorf("%s is %d bytes, want %d (%.40q…)", kv.Key, len(v), len(w), v)
		}
		if len(v) > 2048 {
			t.Errorf("%s is %d bytes of the agent's choosing", kv.Key, len(v))
		}
	}
	if !strings.HasPrefix(want["url.path"], "/v1/refunds/AAA") || len(want["url.path"]) > 2048 || len(want["server.address"]) > 255 ||
		len(want["http.request.method"]) > 255 {
		t.Fatalf("the bounds themselves: path %d, host %d, method %d bytes", len(want["url.path"]), len(want["server.address"]), len(want["http.request.method"]))
	}
	for _, l := range sp.Links {
		total += len(l.SpanContext.TraceState().String())
	}
	total += len(sp.SpanContext.TraceState().String())
	if total > 3<<10 {
		t.Errorf("the span holds %d bytes of attributes and tracestate", total)
	}
}
