package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/quota"
)

// scriptedLedger answers from fields; it is not a store fake (the ledger's
// behaviour is tested against real Postgres), only a way to make the
// engine's dependencies fail on purpose.
type scriptedLedger struct {
	principal ledger.Principal
	lookupErr error
	recordErr error
	panicMsg  string
	recorded  []ledger.Decision
}

func (l *scriptedLedger) LookupCredential(context.Context, [32]byte) (ledger.Principal, error) {
	if l.panicMsg != "" {
		panic(l.panicMsg)
	}
	return l.principal, l.lookupErr
}

func (l *scriptedLedger) InTx(context.Context, func(*ledger.Tx) error) error {
	return errors.New("scriptedLedger: no transactions expected")
}

func (l *scriptedLedger) ReadForDecision(ctx context.Context, r ledger.DecisionRead) (ledger.DecisionFacts, error) {
	p, err := l.LookupCredential(ctx, r.CredentialHash)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.DecisionFacts{PrincipalErr: err}, nil
	}
	return ledger.DecisionFacts{Principal: p}, err
}

func (l *scriptedLedger) Apply(context.Context, *ledger.Write) error {
	return errors.New("scriptedLedger: no writes expected")
}

func (l *scriptedLedger) AppliedAttempt(context.Context, ledger.Intent) (ledger.Attempt, error) {
	return ledger.Attempt{}, errors.New("scriptedLedger: no intents")
}

func (l *scriptedLedger) Intent(context.Context, ledger.Key) (ledger.Intent, error) {
	return ledger.Intent{}, errors.New("scriptedLedger: no intents")
}

func (l *scriptedLedger) GetIntent(context.Context, ledger.Key) (ledger.Intent, []ledger.Attempt, error) {
	return ledger.Intent{}, nil, errors.New("scriptedLedger: no intents")
}

func (l *scriptedLedger) Commit(context.Context, ledger.AttemptResult) (ledger.Intent, error) {
	return ledger.Intent{}, errors.New("scriptedLedger: no commits")
}

func (l *scriptedLedger) CheckReporter(context.Context, ledger.AttemptResult) (ledger.Intent, string, error) {
	return ledger.Intent{}, "", errors.New("scriptedLedger: no reported commits")
}

func (l *scriptedLedger) AgentOwner(context.Context, string) (string, error) {
	return "", errors.New("scriptedLedger: no owner lookups expected")
}

func (l *scriptedLedger) NewWrite() *ledger.Write { return ledger.NewWrite() }

func (l *scriptedLedger) MarkSent(context.Context, ledger.Key, int, bool, time.Duration) (ledger.Intent, error) {
	return ledger.Intent{}, errors.New("scriptedLedger: no attempts")
}

func (l *scriptedLedger) RecordDecision(_ context.Context, d ledger.Decision) (int64, error) {
	if l.recordErr != nil {
		return 0, l.recordErr
	}
	l.recorded = append(l.recorded, d)
	return int64(len(l.recorded)), nil
}

func TestDecideDeniesEveryFailure(t *testing.T) {
	secret, _, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	active := ledger.Principal{
		Credential: ledger.Credential{ID: "crd_1", AgentID: "agt_1", Scope: credential.ScopeExecute, ExpiresAt: now.Add(time.Hour)},
		Agent:      ledger.Agent{ID: "agt_1"},
	}
	revokedAt := now.Add(-time.Minute)
	withCred := func(p ledger.Principal, f func(*ledger.Principal)) ledger.Principal { f(&p); return p }
	cases := []struct {
		name       string
		cred       string
		truncated  bool
		ledger     *scriptedLedger
		cancel     bool
		wantCode   string
		wantStatus int
		wantRecord bool
	}{
		{"no credential", "", false, &scriptedLedger{}, false, ReasonCredentialMissing, 403, true},
		{"malformed credential", "sk_live_x", false, &scriptedLedger{}, false, ReasonCredentialUnknown, 403, true},
		{"unknown credential", secret, false, &scriptedLedger{lookupErr: ledger.ErrNotFound}, false, ReasonCredentialUnknown, 403, true},
		{"ledger down on lookup", secret, false, &scriptedLedger{lookupErr: ledger.ErrUnavailable}, false, ReasonLedgerUnavailable, 503, false},
		{"lookup internal error", secret, false, &scriptedLedger{lookupErr: errors.New("syntax error at or near")}, false, ReasonInternal, 503, true},
		{"panic inside", secret, false, &scriptedLedger{panicMsg: "boom"}, false, ReasonInternal, 503, false},
		{"cancelled", secret, false, &scriptedLedger{principal: active}, true, ReasonCancelled, 503, false},
		{"revoked credential", secret, false, &scriptedLedger{principal: withCred(active, func(p *ledger.Principal) { p.Credential.RevokedAt = &revokedAt })}, false, ReasonCredentialRevoked, 403, true},
		{"expired credential", secret, false, &scriptedLedger{principal: withCred(active, func(p *ledger.Principal) { p.Credential.ExpiresAt = now })}, false, ReasonCredentialExpired, 403, true},
		{"revoked agent", secret, false, &scriptedLedger{principal: withCred(active, func(p *ledger.Principal) { p.Agent.Revoked = true })}, false, ReasonAgentRevoked, 403, true},
		{"truncated body", secret, true, &scriptedLedger{principal: active}, false, ReasonBodyTruncated, 403, true},
		{"no adapter for the route", secret, false, &scriptedLedger{principal: active}, false, ReasonRouteUnknown, 403, true},
		{"decision not durable", secret, false, &scriptedLedger{principal: active, recordErr: ledger.ErrUnavailable}, false, ReasonLedgerUnavailable, 503, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(tc.ledger, Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())
			e.now = func() time.Time { return now }
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancel {
				cancel()
			} else {
				defer cancel()
			}
			out := e.Decide(ctx, Request{
				Source: SourceExtAuthz, RequestID: "req-" + strings.ReplaceAll(tc.name, " ", "-"), Credential: tc.cred,
				Method: http.MethodPost, Host: "api.stripe.com", Path: "/v1/refunds", BodyTruncated: tc.truncated,
			})
			if out.Verdict != Block {
				t.Fatalf("verdict = %s, want BLOCK (fail closed)", out.Verdict)
			}
			if out.ReasonCode != tc.wantCode || out.HTTPStatus != tc.wantStatus {
				t.Fatalf("got %s/%d, want %s/%d (%s)", out.ReasonCode, out.HTTPStatus, tc.wantCode, tc.wantStatus, out.Reason)
			}
			var body struct {
				Error struct{ Code, Message, Verdict string } `json:"error"`
			}
			if err := json.Unmarshal(out.Body, &body); err != nil || body.Error.Code != tc.wantCode || body.Error.Message == "" {
				t.Fatalf("refusal body %s: %v", out.Body, err)
			}
			if got := len(tc.ledger.recorded) == 1; got != tc.wantRecord {
				t.Fatalf("recorded = %v, want %v", tc.ledger.recorded, tc.wantRecord)
			}
			if tc.wantRecord {
				d := tc.ledger.recorded[0]
				if d.Verdict != "BLOCK" || d.ReasonCode != tc.wantCode || d.RequestID != "req-"+strings.ReplaceAll(tc.name, " ", "-") {
					t.Fatalf("recorded decision %+v", d)
				}
				if out.DecisionID == 0 {
					t.Fatal("outcome lacks its decision id")
				}
			}
		})
	}
}

func TestFailedCredentialsAreLimitedPerSource(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	opts := quota.Options{Rate: 0.01, Burst: 3, Now: clock}
	l := &scriptedLedger{lookupErr: ledger.ErrNotFound}
	e := New(l, Options{Failures: quota.NewFailures(opts, opts)}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())
	e.now = clock
	guess := func(peer string) Outcome {
		secret, _, err := credential.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return e.Decide(context.Background(), Request{Source: SourceExtAuthz, RequestID: "r", Credential: secret, Peer: peer,
			Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds"})
	}
	for i := range 3 {
		if out := guess("10.0.0.9"); out.ReasonCode != ReasonCredentialUnknown {
			t.Fatalf("guess %d: %s", i, out.ReasonCode)
		}
	}
	out := guess("10.0.0.9")
	if out.ReasonCode != ReasonTooManyFailures || out.HTTPStatus != 429 || out.ResponseHeaders["retry-after"] == "" {
		t.Fatalf("fourth guess: %s %d %v", out.ReasonCode, out.HTTPStatus, out.ResponseHeaders)
	}
	// Another source is not punished for this one's guesses.
	if out := guess("10.0.0.10"); out.ReasonCode != ReasonCredentialUnknown {
		t.Fatalf("other source: %s", out.ReasonCode)
	}
}
