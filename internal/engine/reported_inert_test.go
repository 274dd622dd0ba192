package engine

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/rail"
)

// hostileFind is the account's adapter whose listing answers with found
// and err, as a rail (or a proxy in front of it) may write them.
type hostileFind struct {
	rail.Adapter
	found rail.Finding
	err   error
}

func (h hostileFind) Find(context.Context, rail.Client, rail.Action, string, time.Time) (rail.Finding, error) {
	return h.found, h.err
}

// TestReportedAnswerReasonKeepsRailTextInert: a native caller's "applied"
// checked at the rail's listing leaves a reason that goes into the intent
// and its signed webhooks; the listing's error and the listed entity's id
// and currency are the rail's text, and may not write markup or a line
// break there (found by a review).
func TestReportedAnswerReasonKeepsRailTextInert(t *testing.T) {
	const hostile = "<https://x|APPROVE> <img src=x>\n@channel"
	cases := []struct {
		name  string
		found rail.Finding
		err   error
		says  string
	}{
		{"listing error", rail.Finding{}, errors.New("stripe: 400: " + hostile), "listing could not be read"},
		{"listed id, another amount", rail.Finding{Pages: 1, Match: &rail.Entity{ID: "re_1" + hostile, AmountMinor: 9, Currency: "usd"}}, nil, "not the 700 decided"},
		{"listed currency", rail.Finding{Pages: 1, Match: &rail.Entity{ID: "re_1" + hostile, AmountMinor: 700, Currency: "eur" + hostile}}, nil, "the rail lists re_1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newMCPRig(t, nil)
			ctx := context.Background()
			out := r.e.Decide(ctx, r.nativeCall(1, 700))
			if out.Verdict != Allow || out.Intent == nil || out.Intent.CommitToken == "" {
				t.Fatalf("native Decide = %s %s %s", out.Verdict, out.ReasonCode, out.Reason)
			}
			acct, ok := r.e.opts.Rails.ByID(out.Intent.RailAccount)
			if !ok {
				t.Fatal("no account")
			}
			acct.Adapter = hostileFind{Adapter: acct.Adapter, found: tc.found, err: tc.err}
			entity := r.createAsServer(t, 700, out.Intent.BodyValue)
			p, err := r.e.Authenticate(ctx, Caller{Credential: r.secret})
			if err != nil {
				t.Fatal(err)
			}
			ref := IntentRef{RailAccount: out.Intent.RailAccount, SIK: out.Intent.SIK, AttemptSeq: out.Intent.AttemptSeq, BodyStamped: true}
			it, c, err := r.e.CommitReported(ctx, p, out.Intent.CommitToken, ref, rail.Response{Status: http.StatusOK,
				Headers: map[string]string{"content-type": "application/json"}, Body: toolAnswer(1, string(entity))})
			if err != nil || c.Outcome != rail.Ambiguous {
				t.Fatalf("report = %s (%s), %v; want ambiguous", c.Outcome, c.Reason, err)
			}
			for _, reason := range []string{c.Reason, it.Reason} {
				if strings.ContainsAny(reason, "<>|\r\n") || !strings.Contains(reason, tc.says) {
					t.Fatalf("reason = %q; want no <, >, | or line break, and %q", reason, tc.says)
				}
			}
		})
	}
}
