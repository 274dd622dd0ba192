package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ErrUnknownAccount means a commit names a rail account that is not
// configured.
var ErrUnknownAccount = errors.New("engine: unknown rail account")

// ErrUnauthenticated means a native call presented no agent credential, or
// one that is unknown, expired or revoked, or of a revoked agent.
var ErrUnauthenticated = errors.New("engine: unauthenticated")

// commitTokenPrefix marks a commit token, so that one pasted where a
// credential belongs (or the other way round) is recognisable.
const commitTokenPrefix = "cct_"

// newCommitToken returns a random commit token and its SHA-256, the only
// form the ledger keeps.
func newCommitToken() (string, []byte, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("commit token: %w", err)
	}
	tok := commitTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(tok))
	return tok, h[:], nil
}

// Caller is who makes a native API call, as the server saw it.
type Caller struct {
	// Credential is the agent credential presented ("" when none was).
	Credential string
	// Peer is the caller's source, for the failed-credential quota.
	Peer      string
	RequestID string
}

// Authenticate resolves a native caller's agent credential, under the same
// failed-credential quota as Decide. Errors match ErrUnauthenticated,
// quota.ErrExhausted, ledger.ErrUnavailable or context.Canceled.
func (e *Engine) Authenticate(ctx context.Context, c Caller) (ledger.Principal, error) {
	if err := e.opts.Failures.Check(c.Peer, credentialIdentity(c.Credential)); err != nil {
		wait := time.Second
		if ex := (*quota.ExhaustedError)(nil); errors.As(err, &ex) {
			wait = ex.RetryAfter
		}
		return ledger.Principal{}, &quota.ExhaustedError{Scope: "failed credential attempts", RetryAfter: wait}
	}
	out, p, ok := e.authenticate(ctx, Request{Source: SourceDecide, RequestID: requestIDOf(c.RequestID), Credential: c.Credential, Peer: c.Peer},
		func(hash [32]byte) (ledger.Principal, error) { return e.ledger.LookupCredential(ctx, hash) })
	if ok {
		return *p, nil
	}
	return ledger.Principal{}, authError(out)
}

// authError is the error of a refused authentication outcome.
func authError(out Outcome) error {
	switch out.ReasonCode {
	case ReasonLedgerUnavailable:
		return fmt.Errorf("%w: %s", ledger.ErrUnavailable, out.Reason)
	case ReasonCancelled:
		return context.Canceled
	case ReasonTooManyFailures:
		wait := time.Second
		if n, err := strconv.Atoi(out.ResponseHeaders["retry-after"]); err == nil && n > 0 {
			wait = time.Duration(n) * time.Second
		}
		return &quota.ExhaustedError{Scope: "failed credential attempts", RetryAfter: wait}
	case ReasonInternal:
		return errors.New(out.Reason)
	}
	return fmt.Errorf("%w (%s): %s", ErrUnauthenticated, out.ReasonCode, out.Reason)
}

// IsAuthRefusal reports whether a Decide outcome refused the caller's
// credential itself (not the action): the native API answers those with an
// error, not a verdict.
func IsAuthRefusal(out Outcome) bool {
	switch out.ReasonCode {
	case ReasonCredentialMissing, ReasonCredentialUnknown, ReasonCredentialRevoked, ReasonCredentialExpired,
		ReasonAgentRevoked, ReasonTooManyFailures:
		return true
	}
	return false
}

// AuthError is the error of an outcome IsAuthRefusal accepts.
func AuthError(out Outcome) error { return authError(out) }

// ChargeAgent takes a decision from the agent's bucket (limits.go) for
// something the agent asks of the ledger besides a decision: a read (the
// native GetIntent: its intent and every attempt's stored request and
// answer) or a report (CommitReported), so that these, as decisions, are
// bounded per agent. Past the bucket it is a *quota.ExhaustedError.
func (e *Engine) ChargeAgent(p ledger.Principal) error {
	if ok, wait := e.decisions.Allow("agent\x00" + p.Agent.ID); !ok {
		return &quota.ExhaustedError{Scope: "decisions, reports and reads of agent " + p.Agent.ID, RetryAfter: wait}
	}
	return nil
}

// CommitReported is Commit for an answer a caller reports through the
// native API: accepted only from the intent's own agent (p) with the commit
// token Decide issued with the intent's latest attempt. Another agent's
// intent is ErrNotFound, as one that does not exist; a wrong, stale or
// missing token is ledger.ErrCommitRefused. The caller's word is recorded
// but never on its own makes the intent sendable again (see ledger.Commit).
//
// Every report takes a decision from the agent's bucket (limits.go): each
// one writes to the ledger, and an answer the rail has not settled (a 409)
// may be reported again and again while the attempt's lease lasts. A
// report past the bucket is a *quota.ExhaustedError, recorded nowhere.
func (e *Engine) CommitReported(ctx context.Context, p ledger.Principal, token string, ref IntentRef, resp rail.Response) (ledger.Intent, rail.Classification, error) {
	if err := e.ChargeAgent(p); err != nil {
		return ledger.Intent{}, rail.Classification{}, err
	}
	rep := &ledger.Reporter{AgentID: p.Agent.ID, TokenHash: sha256.Sum256([]byte(token))}
	if token == "" {
		// No token is never a match, whatever a row holds.
		rep.TokenHash = [32]byte{}
	}
	return e.commit(ctx, ref, resp, rep)
}

// Commit classifies the rail's answer to an allowed attempt with the rail's
// adapter and records it. It is what ext_proc runs on the response path:
// the trusted reporter of what the rail answered Envoy.
func (e *Engine) Commit(ctx context.Context, ref IntentRef, resp rail.Response) (ledger.Intent, rail.Classification, error) {
	return e.commit(ctx, ref, resp, nil)
}

func (e *Engine) commit(ctx context.Context, ref IntentRef, resp rail.Response, rep *ledger.Reporter) (it ledger.Intent, c rail.Classification, err error) {
	ctx, span := e.startCommit(ctx, ref, rep)
	defer func() { endCommit(span, it, c, err) }()
	key := ledger.Key{RailAccount: ref.RailAccount, SIK: ref.SIK}
	if rep != nil && ref.RailAccount == "" {
		return ledger.Intent{}, rail.Classification{}, ledger.NotFoundIntent(key)
	}
	var acct *rails.Account
	if e.opts.Rails != nil {
		acct, _ = e.opts.Rails.ByID(ref.RailAccount)
	}
	if acct == nil {
		if rep != nil {
			// A caller learns nothing of the configuration it cannot use.
			return ledger.Intent{}, rail.Classification{}, ledger.NotFoundIntent(key)
		}
		return ledger.Intent{}, rail.Classification{}, fmt.Errorf("%w %q", ErrUnknownAccount, ref.RailAccount)
	}
	var stamp string // the attempt's, for a reported answer
	switch s := ref.seen; {
	case rep != nil:
		// A reported answer is heard only from the agent the attempt's
		// token was issued to, with that token: before anything is done
		// for it, a read of the rail's listing among them.
		if it, stamp, err = e.ledger.CheckReporter(ctx, ledger.AttemptResult{Key: key, Seq: ref.AttemptSeq, ReportedBy: rep}); err != nil {
			return ledger.Intent{}, rail.Classification{}, err
		}
	case s != nil && s.Key == key && s.State == intent.InFlight && s.AttemptCount == ref.AttemptSeq:
		// The response path's own mark read it (the action is immutable;
		// the commit asserts the state still holds): no second read.
		it = *s
	default:
		if it, err = e.ledger.Intent(ctx, key); err != nil {
			return ledger.Intent{}, rail.Classification{}, err
		}
	}
	if ref.BodyStamped && ref.BodyValue == "" {
		// A native caller says it sent the body stamp: it is the attempt's
		// (ext_proc names the one it wrote).
		ref.BodyValue = stamp
	}
	a, err := ActionOf(it)
	if err != nil {
		return ledger.Intent{}, rail.Classification{}, err
	}
	c = acct.Adapter.Classify(a, resp)
	if ref.BodyStamped {
		// A 2xx carrying another entity's stamp is not this request's.
		c = c.CheckStamp(ref.BodyValue)
	}
	// An answer naming another JSON-RPC id than the one the call left
	// with is another request's (a server routing answers by id): it
	// proves neither applied nor, above all, not applied.
	c = c.CheckCall(ref.CallID)
	if rep != nil {
		c, resp = e.reported(ctx, acct, rep.AgentID, a, it, ref, c, resp)
	}
	r := ledger.AttemptResult{Key: key, Seq: ref.AttemptSeq, EntityID: c.EntityID, FeeMinor: c.FeeMinor,
		Reason: c.Reason, ReconcileDelay: e.opts.ReconcileDelay, BodyStamped: ref.BodyStamped, ReportedBy: rep, Seen: &it}
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

// reportedSinceSlack widens the creation-time bound of the listing that
// confirms a reported "applied", as the reconciler's does
// (reconcile.DefaultSinceSlack): it is taken off the start of the first
// attempt under the stamp, on the database's clock, and covers a
// difference between that clock and the rail's, not the intent's age.
const reportedSinceSlack = time.Hour

// reported is what a native caller's answer is taken for. The caller chose
// every byte of it, so:
//   - its reason names no word of it: an intent's reason is shown to every
//     agent of its owner that sends the same request, and one agent must
//     not write into another's context (the answer itself stays on the
//     attempt, for the owner);
//   - an "applied" counts only once the rail's own listing bears it out
//     (confirmReported): it posts the hold, tells the owner's webhook and
//     is replayed to a duplicate, a sibling agent's among them.
func (e *Engine) reported(ctx context.Context, acct *rails.Account, agentID string, a rail.Action, it ledger.Intent, ref IntentRef,
	c rail.Classification, resp rail.Response) (rail.Classification, rail.Response) {
	switch c.Outcome {
	case rail.Applied:
		return e.confirmReported(ctx, acct, agentID, a, it, ref, resp)
	case rail.InProgress:
		c.Reason = "the caller reported the request still in progress at the rail"
	case rail.Rejected, rail.FingerprintMismatch:
		c.Reason = "the caller reported a definite refusal"
	default:
		c.Reason = "the caller reported no definite answer"
	}
	return c, resp
}

// confirmReported checks at the rail an "applied" that a native caller
// reported. The rail's listing of the action's subject must show an entity
// carrying this attempt's stamp, with the action's amount and currency:
// then it is applied as that entity (whatever id the caller named), and the
// answer kept is the entity as the rail lists it. Anything less is
// ambiguous, with no entity: the intent goes to reconciliation, which
// settles it from the rail.
//
// The listing is read only where the answer can move the intent: while it
// is IN_FLIGHT on this attempt, or once it was settled as not applied (a
// confirmed "applied" then quarantines it), and there twice at once, then
// once a minute, per attempt. A commit token outlives its attempt, and every read
// spends the owner's rail rate limit, which the reconciler and the other
// agents share. The listing's pages are the reporting agent's (agentID)
// reads, from the bucket its Decides draw on (railreads.go): past it, the
// answer is left to reconciliation, whose pace is Countersign's own.
func (e *Engine) confirmReported(ctx context.Context, acct *rails.Account, agentID string, a rail.Action, it ledger.Intent, ref IntentRef,
	resp rail.Response) (rail.Classification, rail.Response) {
	unconfirmed := func(format string, args ...any) rail.Classification {
		return rail.Classification{Outcome: rail.Ambiguous,
			Reason: fmt.Sprintf("the caller reported it applied, but %s; reconciliation settles it from the rail", fmt.Sprintf(format, args...))}
	}
	live := it.State == intent.InFlight && it.AttemptCount == ref.AttemptSeq
	settledAbsent := (it.State == intent.FailedTerminal || it.State == intent.ConfirmedNotApplied) && it.AttemptCount == ref.AttemptSeq
	switch {
	case !live && !settledAbsent:
		return unconfirmed("the intent is %s, which a reported answer does not move", it.State), resp
	case !ref.BodyStamped || ref.BodyValue == "":
		return unconfirmed("it did not confirm that the request carried the body stamp, so the rail cannot show the entity is this attempt's"), resp
	case settledAbsent:
		if ok, _ := e.lateConfirms.Allow(fmt.Sprintf("%s#%d", it.Key, ref.AttemptSeq)); !ok {
			return unconfirmed("this attempt's answer was checked at the rail twice in the last minute"), resp
		}
	}
	// No entity under the stamp is older than the first attempt that
	// carried it (a retry after a proven absence keeps it): the listing
	// starts there, not at the intent's creation, however old.
	var first time.Time
	if err := e.ledger.InTx(ctx, func(tx *ledger.Tx) (err error) {
		first, err = tx.StampFirstStarted(ctx, it.Key, ref.BodyValue)
		return err
	}); err != nil {
		return unconfirmed("the ledger could not say when a request under its stamp could first have left (%v)", err), resp
	}
	lctx, cancel := context.WithTimeout(ctx, e.opts.ResolveTimeout)
	defer cancel()
	reads := e.meter(acct.Client, agentID, acct)
	f, err := acct.Adapter.Find(lctx, reads.client(), a, ref.BodyValue, first.Add(-reportedSinceSlack))
	_, limited := reads.limited()
	switch {
	case limited:
		return unconfirmed("the reporting agent's reads at rail account %s are used up for now (%s)", acct.ID, ReasonRailReadsLimited), resp
	case err != nil:
		// A listing's error carries the rail's own message (or a proxy's
		// page), and this reason leaves in signed webhooks: inert, as
		// every rail-written byte in a reason.
		return unconfirmed("the rail's listing could not be read (%s)", inert.Text(err.Error())), resp
	case f.Match == nil:
		return unconfirmed("the rail lists no entity carrying this attempt's stamp (%d pages read)", f.Pages), resp
	case a.AmountMinor != nil && f.Match.AmountMinor != *a.AmountMinor:
		return unconfirmed("the rail lists %s for %d, not the %d decided", inert.Token(f.Match.ID), f.Match.AmountMinor, *a.AmountMinor), resp
	case a.AmountMinor == nil && f.Match.AmountMinor != it.AmountMinor:
		// A full refund is sent for the amount its intent holds (the
		// Decide answer's stamps name it).
		return unconfirmed("the rail lists %s for %d, not the %d held", inert.Token(f.Match.ID), f.Match.AmountMinor, it.AmountMinor), resp
	case a.Currency != "" && !strings.EqualFold(f.Match.Currency, a.Currency):
		return unconfirmed("the rail lists %s in %q, not %q", inert.Token(f.Match.ID), inert.Token(f.Match.Currency), inert.Token(a.Currency)), resp
	}
	listed := rail.Response{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"}, Body: f.Match.Raw}
	if la, ok := acct.Adapter.(rail.ListedAnswerer); ok {
		if listed, err = la.ListedAnswer(*f.Match); err != nil {
			return unconfirmed("its answer could not be rebuilt from the rail's listing (%s)", inert.Text(err.Error())), resp
		}
	}
	lc := acct.Adapter.Classify(a, listed)
	if lc.Outcome != rail.Applied || lc.EntityID != f.Match.ID {
		return unconfirmed("the rail's own listing of %s does not read as applied (%s)", inert.Token(f.Match.ID), lc.Reason), resp
	}
	lc.Reason = "applied at the rail, as its listing shows"
	return lc, listed
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

// MarkSent records, while the attempt is live, that its request leaves
// with its body stamp (stamped) or without (no body, or no place for the
// stamp: then no listing can prove it absent); ext_proc calls it before
// letting the request leave, and stops the request on an error. It
// returns ref, marked stamped if it was, carrying the intent as the mark
// found it, which the commit of the attempt's answer starts from instead
// of reading it.
func (e *Engine) MarkSent(ctx context.Context, ref IntentRef, stamped bool) (IntentRef, error) {
	it, err := e.ledger.MarkSent(ctx, ledger.Key{RailAccount: ref.RailAccount, SIK: ref.SIK}, ref.AttemptSeq, stamped, e.opts.RailSettle)
	if err != nil {
		return ref, err
	}
	ref.BodyStamped, ref.seen = stamped, &it
	return ref, nil
}
