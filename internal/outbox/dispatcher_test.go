package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

const testSecret = "whsec_dispatcher_test_secret"

// received is one request a test receiver got.
type received struct {
	delivery, event, attempt, timestamp, signature string
	body                                           []byte
	status                                         int // what the receiver answered; 0 if it never did
	verifyErr                                      error
}

// receiver is an owner's webhook endpoint. answer decides the reply to the
// n-th request (from 1); it may block until the request's context ends.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, r *http.Request) int
}

// loopback lets deliveries reach the test receivers on 127.0.0.1.
var loopback = AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

func newReceiver(t *testing.T, answer func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g := received{delivery: r.Header.Get(HeaderDelivery), event: r.Header.Get(HeaderEvent),
			attempt: r.Header.Get(HeaderAttempt), timestamp: r.Header.Get(HeaderTimestamp),
			signature: r.Header.Get(HeaderSignature), body: body}
		g.verifyErr = Verify(testSecret, g.signature, body, time.Minute, time.Now())
		rc.mu.Lock()
		rc.got = append(rc.got, g)
		i := len(rc.got) - 1
		rc.mu.Unlock()
		status := rc.answer(i+1, r)
		if r.Context().Err() != nil {
			return // the sender went away; nobody hears an answer
		}
		rc.mu.Lock()
		rc.got[i].status = status
		rc.mu.Unlock()
		w.WriteHeader(status)
		_, _ = w.Write([]byte("answer " + strconv.Itoa(status)))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func always(status int) func(int, *http.Request) int {
	return func(int, *http.Request) int { return status }
}

// fixture is a ledger with an owner, an agent and a webhook on a receiver.
type fixture struct {
	store   *ledger.Store
	owner   string
	agentID string
	webhook ledger.Webhook
}

func newFixture(t *testing.T, rc *receiver) fixture {
	t.Helper()
	ctx := context.Background()
	s, err := ledger.Open(ctx, pgtest.NewDatabase(t), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	a, err := s.CreateAgent(ctx, "own_dispatch", "bot")
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWebhook(ctx, "own_dispatch", ledger.WebhookSpec{URL: rc.srv.URL + "/hook", Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return fixture{store: s, owner: "own_dispatch", agentID: a.ID, webhook: w}
}

func testSIK(n int) string {
	return strings.NewReplacer("0", "A", "1", "B", "8", "C", "9", "D").Replace(fmt.Sprintf("OUTBOX%026d", n))
}

// applied drives an intent of the agent to APPLIED: one intent.applied event.
func (f fixture) applied(t *testing.T, n int) ledger.Key {
	t.Helper()
	ctx := context.Background()
	k := ledger.Key{RailAccount: "acct_outbox", SIK: testSIK(n)}
	err := ledgertest.InFlight(ctx, f.store, ledger.NewIntent{
		Key: k, Rail: "stripe", Action: "refund", Subject: "pi_" + strconv.Itoa(n), AmountMinor: 500, Currency: "EUR",
		Canonical: `{"v":1}`, AgentID: f.agentID}, k.SIK+"-0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Commit(ctx, ledger.AttemptResult{Key: k, Seq: 1, Outcome: ledger.OutcomeApplied, EntityID: "re_" + strconv.Itoa(n)}); err != nil {
		t.Fatal(err)
	}
	return k
}

// passUntil runs passes until cond holds or the deadline passes.
func passUntil(t *testing.T, d *Dispatcher, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", within)
		}
		if _, _, _, err := d.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeliverySignatureVerifies(t *testing.T) {
	rc := newReceiver(t, always(204))
	f := newFixture(t, rc)
	k := f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-1"}
	delivered, failed, dead, err := d.Pass(context.Background())
	if err != nil || delivered != 1 || failed != 0 || dead != 0 {
		t.Fatalf("Pass = %d delivered, %d failed, %d dead, %v", delivered, failed, dead, err)
	}
	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests", len(got))
	}
	g := got[0]
	evs, err := f.store.EventsOf(context.Background(), k)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	if g.verifyErr != nil {
		t.Fatalf("signature %q does not verify: %v", g.signature, g.verifyErr)
	}
	if want := ledger.DeliveryID(evs[0].ID, f.webhook.ID); g.delivery != want || g.event != "intent.applied" || g.attempt != "1" {
		t.Fatalf("headers: delivery %q (want %q), event %q, attempt %q", g.delivery, want, g.event, g.attempt)
	}
	if !strings.HasPrefix(g.signature, "t="+g.timestamp+",v1=") {
		t.Fatalf("signature %q is not signed at the timestamp header %q", g.signature, g.timestamp)
	}
	var body map[string]any
	if err := json.Unmarshal(g.body, &body); err != nil || body["sik"] != k.SIK || body["event"] != "intent.applied" || body["amount_minor"] != float64(500) {
		t.Fatalf("body %s, %v", g.body, err)
	}
	// A receiver with another secret, or reading a tampered body, rejects it.
	if err := Verify("whsec_someone_else_000", g.signature, g.body, time.Minute, time.Now()); !errors.Is(err, ErrSignatureMismatch) {
		t.Fatalf("Verify with another secret = %v", err)
	}
	st, err := f.store.GetDelivery(context.Background(), f.owner, evs[0].ID, f.webhook.ID)
	if err != nil || st.State != "delivered" || st.Attempts != 1 {
		t.Fatalf("delivery = %+v, %v", st, err)
	}
	// Nothing is sent twice once delivered.
	if n, _, _, err := d.Pass(context.Background()); err != nil || n != 0 || len(rc.requests()) != 1 {
		t.Fatalf("second pass delivered %d (%v); receiver has %d requests", n, err, len(rc.requests()))
	}
}

func TestFailedDeliveryIsRetriedWithTheSameID(t *testing.T) {
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n == 1 {
			return 500
		}
		return 200
	})
	f := newFixture(t, rc)
	k := f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-1", BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	delivered, failed, dead, err := d.Pass(context.Background())
	if err != nil || delivered != 0 || failed != 1 || dead != 0 {
		t.Fatalf("first Pass = %d delivered, %d failed, %d dead, %v", delivered, failed, dead, err)
	}
	evs, _ := f.store.EventsOf(context.Background(), k)
	st, err := f.store.GetDelivery(context.Background(), f.owner, evs[0].ID, f.webhook.ID)
	if err != nil || st.State != "pending" || st.LastStatus != 500 || st.LastError != "HTTP 500" || st.LeaseOwner != "" {
		// The receiver is on loopback, admitted by Allow only: its
		// answer ("answer 500") stays out of what the owner reads.
		t.Fatalf("delivery after a 500 = %+v, %v", st, err)
	}
	passUntil(t, d, 10*time.Second, func() bool { return len(rc.requests()) == 2 })
	got := rc.requests()
	if got[0].delivery != got[1].delivery || string(got[0].body) != string(got[1].body) || got[0].attempt != "1" || got[1].attempt != "2" {
		t.Fatalf("the retry differs: %+v vs %+v", got[0], got[1])
	}
	for i, g := range got {
		if g.verifyErr != nil {
			t.Fatalf("request %d does not verify: %v", i, g.verifyErr)
		}
	}
	st, err = f.store.GetDelivery(context.Background(), f.owner, evs[0].ID, f.webhook.ID)
	if err != nil || st.State != "delivered" || st.Attempts != 2 {
		t.Fatalf("delivery after the retry = %+v, %v", st, err)
	}
}

func TestDeadAfterMaxAttemptsThenReplayed(t *testing.T) {
	var mu sync.Mutex
	answer := 503
	rc := newReceiver(t, func(int, *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		return answer
	})
	f := newFixture(t, rc)
	f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-1", MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	passUntil(t, d, 10*time.Second, func() bool { return deadLetters(t, f) > 0 })
	dls, _, err := f.store.ListDeadLetters(context.Background(), f.owner, ledger.DeadLetterQuery{})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters = %+v, %v", dls, err)
	}
	dl := dls[0]
	if dl.Attempts != 3 || dl.LastStatus != 503 || dl.State != ledger.DeadLetterDead || len(rc.requests()) != 3 {
		t.Fatalf("dead letter %+v after %d requests (want 3 attempts)", dl, len(rc.requests()))
	}
	// A dead letter is not sent again until it is replayed.
	if delivered, failed, dead, err := d.Pass(context.Background()); err != nil || delivered+failed+dead != 0 {
		t.Fatalf("pass over a dead letter = %d/%d/%d, %v", delivered, failed, dead, err)
	}
	mu.Lock()
	answer = 200
	mu.Unlock()
	if _, err := f.store.ReplayDeadLetter(context.Background(), f.owner, dl.OutboxID, dl.WebhookID); err != nil {
		t.Fatal(err)
	}
	delivered, _, _, err := d.Pass(context.Background())
	if err != nil || delivered != 1 {
		t.Fatalf("pass after replay delivered %d, %v", delivered, err)
	}
	got := rc.requests()
	if len(got) != 4 || got[3].delivery != dl.ID() || got[3].attempt != "1" || got[3].status != 200 {
		t.Fatalf("requests = %+v", got)
	}
}

// deadLetters counts an owner's dead letters still dead.
func deadLetters(t *testing.T, f fixture) int {
	t.Helper()
	dls, _, err := f.store.ListDeadLetters(context.Background(), f.owner, ledger.DeadLetterQuery{State: ledger.DeadLetterDead})
	if err != nil {
		t.Fatal(err)
	}
	return len(dls)
}

func TestDeliveryWithoutA2xxIsAFailure(t *testing.T) {
	elsewhere := newReceiver(t, always(200))
	cases := []struct {
		name       string
		answer     func(int, *http.Request) int
		wantStatus int
		wantError  string
	}{
		{"timeout", func(_ int, r *http.Request) int { <-r.Context().Done(); return 200 }, 0, "no answer within 100ms"},
		{"redirect", func(_ int, r *http.Request) int { return 307 }, 307, "HTTP 307"},
		// On loopback, admitted by Allow only: the answer's body is not shown.
		{"client error", always(400), 400, "HTTP 400"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, tc.answer)
			if tc.name == "redirect" {
				rc.srv.Config.Handler = http.RedirectHandler(elsewhere.srv.URL, http.StatusTemporaryRedirect)
			}
			f := newFixture(t, rc)
			k := f.applied(t, 1)
			d := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-1", Timeout: 100 * time.Millisecond, Lease: 5 * time.Second}
			if delivered, failed, _, err := d.Pass(context.Background()); err != nil || delivered != 0 || failed != 1 {
				t.Fatalf("Pass = %d delivered, %d failed, %v", delivered, failed, err)
			}
			evs, _ := f.store.EventsOf(context.Background(), k)
			st, err := f.store.GetDelivery(context.Background(), f.owner, evs[0].ID, f.webhook.ID)
			if err != nil || st.State != "pending" || st.LastStatus != tc.wantStatus || !strings.HasPrefix(st.LastError, tc.wantError) {
				t.Fatalf("delivery = %+v, %v; want status %d and error %q", st, err, tc.wantStatus, tc.wantError)
			}
			if strings.Contains(st.LastError, ": answer") {
				t.Fatalf("the error shows an internal receiver's answer: %q", st.LastError)
			}
			if strings.Contains(st.LastError, rc.srv.URL) {
				t.Fatalf("the error names the webhook URL: %q", st.LastError)
			}
		})
	}
	if n := len(elsewhere.requests()); n != 0 {
		t.Fatalf("a redirect was followed (%d requests elsewhere)", n)
	}
}

// TestDispatcherStoppedMidDeliveryIsTakenOver: a dispatcher stopped while
// its webhook has not answered records nothing; once its lease expires,
// another dispatcher delivers the event again under the same id.
// (e2e/webhook_test.go does the same with a SIGKILLed process.)
func TestDispatcherStoppedMidDeliveryIsTakenOver(t *testing.T) {
	firstArrived := make(chan struct{})
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 1 {
			close(firstArrived)
			<-r.Context().Done() // hold the first delivery until the sender dies
		}
		return 200
	})
	f := newFixture(t, rc)
	f.applied(t, 1)
	f.applied(t, 2)

	ctxA, stopA := context.WithCancel(context.Background())
	a := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-a", Lease: 500 * time.Millisecond}
	doneA := make(chan struct{})
	go func() { defer close(doneA); a.Run(ctxA, 10*time.Millisecond) }()
	select {
	case <-firstArrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery never arrived")
	}
	stopA()
	<-doneA
	held := rc.requests()[0].delivery

	ctxB, stopB := context.WithCancel(context.Background())
	b := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-b", Lease: 500 * time.Millisecond}
	doneB := make(chan struct{})
	go func() { defer close(doneB); b.Run(ctxB, 10*time.Millisecond) }()
	defer func() { stopB(); <-doneB }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		acked := map[string]bool{}
		for _, g := range rc.requests() {
			if g.status == 200 {
				acked[g.delivery] = true
			}
		}
		if len(acked) == 2 && acked[held] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged %v within the deadline; requests %+v", acked, rc.requests())
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent := 0
	for _, g := range rc.requests() {
		if g.delivery == held {
			sent++
		}
	}
	if sent != 2 {
		t.Fatalf("the held delivery was sent %d times, want 2 (once to the stopped dispatcher, once after)", sent)
	}
}

func TestOutboxDispatcherNeedsAnOwner(t *testing.T) {
	if _, _, _, err := (&Dispatcher{}).Pass(context.Background()); !errors.Is(err, errNoOwner) {
		t.Fatalf("Pass without a store or owner = %v", err)
	}
}
