package engine

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/testclock"
)

// TestDecisionsAreLimitedPerAgent: each request an agent sends takes one
// decision from its bucket, however many reads deciding it needs (a replay
// decided on remembered facts is decided again with a read, and that pass
// takes none); past the bucket a request is refused (decisions_limited,
// 429 with Retry-After) with nothing read at the rail and, of a run of
// them, one record a second; another agent is not held back, and the
// agent is served again once the clock refilled its bucket.
func TestDecisionsAreLimitedPerAgent(t *testing.T) {
	r := newRig(t)
	clock := testclock.New(time.Now())
	r.e = rebuilt(r.e, func(o *Options) { o.DecisionRate, o.DecisionBurst, o.Now = 0.5, 3, clock.Now })
	ctx := context.Background()
	refund := func(secret, id string, amount int) Outcome {
		req := r.refundOf(amount)
		req.Credential, req.RequestID = secret, id
		return r.e.Decide(ctx, req)
	}

	first := refund(r.secret, "req-0", 100)
	if first.Verdict != Allow {
		t.Fatalf("first refund = %s %s: %s", first.Verdict, first.ReasonCode, first.Reason)
	}
	// The same refund again, on remembered facts: read again, one token.
	if out := refund(r.secret, "req-1", 100); out.ReasonCode == ReasonDecisionsLimited || out.Intent == nil || out.Intent.SIK != first.Intent.SIK {
		t.Fatalf("the refund sent again = %s %s: %s; want its intent's answer, with one decision taken", out.Verdict, out.ReasonCode, out.Reason)
	}
	if out := refund(r.secret, "req-2", 101); out.Verdict != Allow {
		t.Fatalf("third request, within the burst = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	reads, before := railReads(r.mock), rowCounts(t, r.url)

	out := refund(r.secret, "req-over", 102)
	if out.Verdict != Block || out.ReasonCode != ReasonDecisionsLimited || out.HTTPStatus != http.StatusTooManyRequests {
		t.Fatalf("request past the burst = %s %s %d: %s; want BLOCK %s 429", out.Verdict, out.ReasonCode, out.HTTPStatus, out.Reason, ReasonDecisionsLimited)
	}
	// 0.5 a second: the next decision is 2 s away.
	if got := out.ResponseHeaders["retry-after"]; got != "2" {
		t.Errorf("retry-after = %q, want 2", got)
	}
	for _, s := range []string{"no money moved", "Retry after 2s", "0.5 a second, 3 at once"} {
		if !strings.Contains(out.Reason, s) {
			t.Errorf("reason %q lacks %q", out.Reason, s)
		}
	}
	for i := range 5 {
		if out := refund(r.secret, "req-flood", 103+i); out.ReasonCode != ReasonDecisionsLimited {
			t.Fatalf("flood request %d = %s %s", i, out.Verdict, out.ReasonCode)
		}
	}
	after := rowCounts(t, r.url)
	if after["decisions"] != before["decisions"]+1 {
		t.Errorf("six refusals in one instant wrote %d decision records; want 1", after["decisions"]-before["decisions"])
	}
	for table, n := range before {
		if table != "decisions" && after[table] != n {
			t.Errorf("refusals past the limit wrote to %s (%d rows, %d before)", table, after[table], n)
		}
	}
	if n := railReads(r.mock); n != reads {
		t.Fatalf("%d rail reads after the refusals, %d before", n, reads)
	}

	if out := refund(r.anotherAgent(t), "req-other", 104); out.Verdict != Allow {
		t.Fatalf("another agent's refund = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}

	clock.Advance(2 * time.Second)
	if out := refund(r.secret, "req-later", 105); out.Verdict != Allow {
		t.Fatalf("refund once the bucket refilled = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	if out := refund(r.secret, "req-later-over", 106); out.ReasonCode != ReasonDecisionsLimited {
		t.Fatalf("the next one = %s %s", out.Verdict, out.ReasonCode)
	}
	if got := rowCounts(t, r.url)["decisions"]; got != after["decisions"]+3 {
		t.Errorf("decision records = %d, want %d: another agent's, the refilled one and the next refusal (a second after the last recorded)", got, after["decisions"]+3)
	}
}

// TestOnlyEnvoysOwnRoutesAreThroughExtProc: an attempt is through Envoy
// with ext_proc in the path (so that one ext_proc never marked sent never
// left) only when the configuration says ext_proc runs and the request
// came by one of Countersign's own Envoy routes, which name the rail
// account; a request through ext_authz that names none (an Istio CUSTOM
// provider routes without them, and runs no ext_proc) is not, whatever the
// configuration says, and a native one never is.
func TestOnlyEnvoysOwnRoutesAreThroughExtProc(t *testing.T) {
	r := newRig(t)
	r.e = rebuilt(r.e, func(o *Options) { o.ExtProcInPath = true })
	for i, tc := range []struct {
		name    string
		account string
		source  Source
		want    bool
	}{
		{"Countersign's own route", "acct_1", SourceExtAuthz, true},
		{"a route that names no account", "", SourceExtAuthz, false},
		{"native", "", SourceDecide, false},
	} {
		req := r.refundOf(100 + i)
		req.RailAccount, req.Source = tc.account, tc.source
		out := r.e.Decide(context.Background(), req)
		if out.Verdict != Allow {
			t.Fatalf("%s: %s %s: %s", tc.name, out.Verdict, out.ReasonCode, out.Reason)
		}
		_, atts := r.attempts(t, out.Intent)
		if len(atts) != 1 || atts[0].ViaEnvoy != tc.want {
			t.Fatalf("%s: attempts %+v; want one, through Envoy with ext_proc: %v", tc.name, atts, tc.want)
		}
	}
}
