package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/outbox"
	"github.com/countersign/countersign/internal/testing/wait"
)

// There is no dispatcher binary: this test binary is one when it is started
// with dispatcherEnv set (init runs before TestMain, so it never builds or
// starts anything else). That gives the test a real process to SIGKILL.
const (
	dispatcherEnv      = "COUNTERSIGN_E2E_DISPATCHER" // the dispatcher's lease owner name
	dispatcherDBEnv    = "COUNTERSIGN_E2E_DISPATCHER_DB"
	dispatcherLeaseEnv = "COUNTERSIGN_E2E_DISPATCHER_LEASE"
	dispatcherBatchEnv = "COUNTERSIGN_E2E_DISPATCHER_BATCH"
)

func init() {
	if owner := os.Getenv(dispatcherEnv); owner != "" {
		os.Exit(runDispatcherProcess(owner))
	}
}

func runDispatcherProcess(owner string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lease, err := time.ParseDuration(os.Getenv(dispatcherLeaseEnv))
	if err != nil {
		log.Error("lease", "err", err)
		return 2
	}
	batch, _ := strconv.Atoi(os.Getenv(dispatcherBatchEnv))
	store, err := ledger.Open(ctx, os.Getenv(dispatcherDBEnv), ledger.Options{})
	if err != nil {
		log.Error("ledger", "err", err)
		return 2
	}
	defer store.Close()
	log.Info("dispatcher running", "owner", owner, "pid", os.Getpid())
	d := &outbox.Dispatcher{Store: store, Owner: owner, Lease: lease, Batch: batch, Log: log,
		Addresses: outbox.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}} // the receiver is on loopback
	d.Run(ctx, 20*time.Millisecond)
	return 0
}

// startDispatcher starts a dispatcher process on the ledger at dbURL.
func startDispatcher(t *testing.T, owner, dbURL string, lease time.Duration, batch int) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), dispatcherEnv+"="+owner, dispatcherDBEnv+"="+dbURL,
		dispatcherLeaseEnv+"="+lease.String(), dispatcherBatchEnv+"="+strconv.Itoa(batch))
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", owner, out.String())
		}
	})
	return cmd
}

// hook is one request the owner's webhook receiver got.
type hook struct {
	delivery string
	event    string
	body     []byte
	verified error
	answered int // the status the receiver answered; 0 if the sender was gone first
}

// TestWebhookReceiverSeesEveryEventAfterDispatcherKilledMidDelivery: three
// refunds go to APPLIED through the real countersign and mockrail, so the
// outbox holds three intent.applied events for the owner's webhook. A
// dispatcher process sends the first and is SIGKILLed while the receiver
// is still holding that request; a second dispatcher process, started
// afterwards, delivers the two events never sent and, once the dead
// process's lease has expired, the one it was killed in the middle of. The
// receiver acknowledges every event, each under its stable delivery id,
// every request signed.
//
// Nothing here waits for a guessed time. The receiver kills dispatcher A
// itself, from inside the request A is waiting on, so A cannot time out and
// record a failure first (its attempt timeout, Lease/2, is the only clock
// in the race, and it is made long). Every other wait polls a condition
// (the receiver's log, the ledger's delivery states) under a deadline that
// a loaded machine does not reach.
func TestWebhookReceiverSeesEveryEventAfterDispatcherKilledMidDelivery(t *testing.T) {
	e := newRailEnv(t, envOptions{noDispatcher: true})
	ctx := context.Background()
	const secret = "whsec_e2e_webhook_secret_0001"

	var mu sync.Mutex
	var hooks []hook
	firstArrived := make(chan struct{})
	dispatcherA := make(chan *os.Process, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := hook{delivery: r.Header.Get(outbox.HeaderDelivery), event: r.Header.Get(outbox.HeaderEvent), body: body,
			verified: outbox.Verify(secret, r.Header.Get(outbox.HeaderSignature), body, time.Minute, time.Now())}
		mu.Lock()
		hooks = append(hooks, h)
		i := len(hooks) - 1
		mu.Unlock()
		if i == 0 {
			// Hold the first delivery and kill its sender while it waits
			// for the answer: mid-delivery by construction.
			if err := (<-dispatcherA).Kill(); err != nil {
				t.Errorf("kill dispatcher A: %v", err)
			}
			close(firstArrived)
			<-r.Context().Done()
			return
		}
		mu.Lock()
		hooks[i].answered = http.StatusOK
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer rcv.Close()
	snapshot := func() []hook {
		mu.Lock()
		defer mu.Unlock()
		return append([]hook(nil), hooks...)
	}

	wh, err := e.store.CreateWebhook(ctx, "own_e2e", ledger.WebhookSpec{URL: rcv.URL + "/countersign", Secret: secret,
		EventTypes: []string{ledger.EventIntentApplied, ledger.EventIntentHeld}})
	if err != nil {
		t.Fatal(err)
	}

	// Three refunds applied at the rail: three events, one delivery each.
	want := map[string]string{} // delivery id → SIK
	for i := 1; i <= 3; i++ {
		pi := fmt.Sprintf("pi_webhook_%d", i)
		e.payment("stripe", pi, 10000, "usd")
		if r := e.stripeRefund(nil, url.Values{"payment_intent": {pi}, "amount": {"1500"}}); r.Status != 200 {
			t.Fatalf("refund %s: %d %s", pi, r.Status, r.Body)
		}
		its := e.settle(pi, 20*time.Second)
		if len(its) != 1 || its[0].State != intent.Applied {
			t.Fatalf("intents on %s = %+v", pi, its)
		}
		evs, err := e.store.EventsOf(ctx, its[0].Key)
		if err != nil || len(evs) != 1 || evs[0].Type != ledger.EventIntentApplied {
			t.Fatalf("events of %s = %+v, %v", its[0].Key, evs, err)
		}
		want[ledger.DeliveryID(evs[0].ID, wh.ID)] = its[0].SIK
	}

	// Dispatcher A takes one delivery at a time; it dies holding the first.
	// Its lease is how long B must wait to resend that one; half of it is
	// A's attempt timeout, which must not run out before the receiver's
	// kill lands, however slow the machine.
	const leaseA = 20 * time.Second
	// B never dies: its lease only sets its attempt timeout (the default
	// 10s, not Lease/2 of a short lease), so a slow receiver answer is not
	// a failed attempt that would be sent again.
	const leaseB = time.Minute
	a := startDispatcher(t, "dispatcher-a", e.dbURL, leaseA, 1)
	dispatcherA <- a.Process
	select {
	case <-firstArrived:
	case <-time.After(2 * time.Minute):
		t.Fatal("dispatcher A never delivered")
	}
	_ = a.Wait()
	held := snapshot()[0].delivery
	if _, ok := want[held]; !ok {
		t.Fatalf("the held delivery %q is none of %v", held, want)
	}
	outboxID, webhookID, err := ledger.ParseDeliveryID(held)
	if err != nil {
		t.Fatal(err)
	}
	// Killed mid-delivery: nothing recorded, the dead process's lease stands.
	st, err := e.store.GetDelivery(ctx, "own_e2e", outboxID, webhookID)
	if err != nil || st.State != "pending" || st.LeaseOwner != "dispatcher-a" || st.Attempts != 1 || st.LastError != "" {
		t.Fatalf("the held delivery after the kill = %+v, %v", st, err)
	}

	// Dispatcher B, a new process, finishes the job. Done means the
	// receiver answered every delivery and the ledger recorded each as
	// delivered (the answer alone is not: B records it afterwards).
	startDispatcher(t, "dispatcher-b", e.dbURL, leaseB, 16)
	acked, recorded := map[string]bool{}, 0
	if !wait.Until(leaseA+2*time.Minute, func() bool {
		acked, recorded = map[string]bool{}, 0
		for _, h := range snapshot() {
			if h.answered == http.StatusOK {
				acked[h.delivery] = true
			}
		}
		for id := range want {
			o, w, _ := ledger.ParseDeliveryID(id)
			if st, err := e.store.GetDelivery(ctx, "own_e2e", o, w); err == nil && st.State == "delivered" {
				recorded++
			}
		}
		return len(acked) == len(want) && recorded == len(want)
	}) {
		t.Fatalf("receiver acknowledged %v of %v, ledger recorded %d delivered, within the deadline", acked, want, recorded)
	}

	got := snapshot()
	sent := map[string]int{}
	for i, h := range got {
		sent[h.delivery]++
		if h.verified != nil {
			t.Errorf("request %d (%s) failed verification: %v", i, h.delivery, h.verified)
		}
		var body struct {
			Event, SIK, State string
		}
		if err := json.Unmarshal(h.body, &body); err != nil || h.event != "intent.applied" || body.Event != "intent.applied" ||
			body.SIK != want[h.delivery] || body.State != "APPLIED" {
			t.Errorf("request %d: event %q, body %s (%v); want intent.applied of %s", i, h.event, h.body, err, want[h.delivery])
		}
	}
	if sent[held] != 2 || got[0].answered != 0 {
		t.Fatalf("the held delivery was sent %d times (first answered %d); want twice, the first never answered", sent[held], got[0].answered)
	}
	for id := range want {
		if id != held && sent[id] != 1 {
			t.Errorf("delivery %s sent %d times, want once", id, sent[id])
		}
		o, w, _ := ledger.ParseDeliveryID(id)
		st, err := e.store.GetDelivery(ctx, "own_e2e", o, w)
		wantAttempts := map[bool]int{true: 2, false: 1}[id == held]
		if err != nil || st.State != "delivered" || st.Attempts != wantAttempts {
			t.Errorf("delivery %s = %+v, %v; want delivered after %d attempts", id, st, err, wantAttempts)
		}
	}
}
