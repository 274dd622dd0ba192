package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
)

// TestReconcilerKilledMidPagination: the rail's answer to an allowed refund
// is lost, 250 newer refunds push it to page 3 of the newest-first listing,
// and countersign serve is SIGKILLed while its reconciler has read pages 1
// and 2 and is waiting for page 3. A half-read listing counts for nothing:
// nothing is recorded, the intent is not CONFIRMED_NOT_APPLIED. Once the
// dead reconciler's claim lapses, a restarted process lists again from page
// 1, finds the refund on page 3 and settles the intent APPLIED with the one
// rail effect carrying its stamp; the agent's retry gets the stored result.
//
// The reconcile claim TTL is 20 s here (--reconcile-claim-ttl; the default
// is 2 minutes): long enough for pages 1 and 2, short enough that the
// restarted process does not wait long for the dead one's claim to lapse.
func TestReconcilerKilledMidPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const subject, amount = "pi_midpage", 777
	e := newRailEnv(t, envOptions{reconcileDelay: 10 * time.Second, routeTimeout: 1500 * time.Millisecond, claimTTL: 20 * time.Second})
	e.payment("stripe", subject, 1_000_000_000, "usd")

	// 1. The refund is applied at the rail but its answer is lost.
	e.fault(map[string]any{"profile": "timeout_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"})
	refund := url.Values{"payment_intent": {subject}, "amount": {fmt.Sprint(amount)}}
	if r := e.stripeRefund(nil, refund); r.Status != 504 {
		t.Fatalf("agent saw %d %s, want the proxy's 504", r.Status, r.Body)
	}
	its := e.intentsOn(subject)
	if len(its) != 1 || its[0].State != intent.Unknown {
		t.Fatalf("after the lost answer: %+v", its)
	}
	key := its[0].Key
	_, atts, err := e.store.GetIntent(ctx, key)
	if err != nil || len(atts) != 1 || atts[0].Stamp == "" {
		t.Fatalf("attempts: %+v %v", atts, err)
	}
	stamp := atts[0].Stamp

	// 2. Listing is slow: pages 1 and 2 take a second each, and page 3 is
	// held far longer than the test lives, so the reconciler is pinned
	// between page 2 and page 3 for as long as it takes to kill it. Each
	// rule is used up by one listing request, so an empty rule set means
	// the page-3 request has arrived and is being held.
	e.mockPost("/_mock/fault", map[string]any{"rules": []map[string]any{
		{"profile": "slow", "count": 2, "delay": "1s", "method": "GET", "path": "/v1/refunds"},
		{"profile": "slow", "count": 1, "delay": "10m", "method": "GET", "path": "/v1/refunds"},
	}})

	// 250 newer refunds, straight at the rail: ours is now the oldest of
	// 251, the last item of page 3 at 100 a page.
	for i := range 250 {
		req, _ := http.NewRequest(http.MethodPost, e.mock+"/v1/refunds",
			strings.NewReader(url.Values{"payment_intent": {subject}, "amount": {fmt.Sprint(1000 + i)}}.Encode()))
		req.Header.Set("Authorization", "Bearer "+stripeKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("filler refund %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("filler refund %d: status %d", i, resp.StatusCode)
		}
	}
	if l := midpageListings(e.journal(), subject, 0); len(l) != 0 {
		t.Fatalf("the reconciler listed before the fillers were in (reconcile delay too short for this machine): %+v", l)
	}

	// Wait until page 1 and page 2 have been answered and the page-3
	// request is held at the rail: the reconciler is mid-pagination.
	deadline := time.Now().Add(90 * time.Second)
	for {
		l := midpageListings(e.journal(), subject, 0)
		if it, _, err := e.store.GetIntent(ctx, key); err != nil || it.State != intent.Unknown && it.State != intent.Reconciling {
			fs, _ := e.store.FindingsFor(ctx, key)
			t.Fatalf("the intent left reconciliation before the listing reached page 3 (the rail answered %d pages): %s (%s) %v\nfindings %+v",
				len(l), it.State, it.Reason, err, fs)
		}
		if len(l) > 2 {
			t.Fatalf("the reconciler got past page 2 before the kill: %+v", l)
		}
		if len(l) == 2 && midpageFaultsLeft(t, e) == 0 {
			if l[0].page2() || !l[1].page2() {
				t.Fatalf("listing requests out of order: %+v", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reconciler did not reach page 3 within 90s; listings %+v\ncountersign output:\n%s", l, e.countersig.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// SIGKILL: no graceful anything, the listing is cut between pages.
	killed := e.countersig
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.cmd.Wait()
	if ws, ok := killed.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("countersign did not die of SIGKILL: %v", killed.cmd.ProcessState)
	}
	killedAt := time.Now()
	atKill := e.journal()

	// 3. A half-read listing proves nothing and must not be recorded as
	// if it did.
	its = e.intentsOn(subject)
	if len(its) != 1 || its[0].State != intent.Reconciling {
		t.Fatalf("at the kill the intent should be claimed (RECONCILING): %+v", its)
	}
	fs, err := e.store.FindingsFor(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Fatalf("findings recorded from a half-read listing: %+v", fs)
	}
	if n := atKill.effectsWithStamp(stamp); n != 1 {
		t.Fatalf("rail effects carrying stamp %s: %d, want 1", stamp, n)
	}
	// The dead reconciler's claim is what the restarted one must wait out.
	claimOwner, claimExpires := midpageClaim(t, e.dbURL, key)
	if claimOwner == "" || claimExpires.Before(time.Now()) {
		t.Fatalf("at the kill the claim is %q until %s", claimOwner, claimExpires)
	}
	t.Logf("killed mid-pagination; dead reconciler %s holds the claim until %s (%s from now)",
		claimOwner, claimExpires.Format(time.StampMilli), time.Until(claimExpires).Round(time.Second))

	// 4. Listing is fast again; a new process on the same ledger.
	e.fault(map[string]any{"profile": "none"})
	e.restartCountersign()
	its = e.settle(subject, time.Until(claimExpires)+90*time.Second)
	j := e.journal()

	var entity string
	for _, f := range j.Effects {
		if f.Amount == amount {
			entity = f.EntityID
		}
	}
	if len(its) != 1 || its[0].State != intent.Applied || entity == "" || its[0].RailEntityID != entity {
		t.Fatalf("intent %+v, journal entity %q", its, entity)
	}
	if n := j.effectsWithStamp(stamp); n != 1 {
		t.Fatalf("rail effects carrying stamp %s: %d, want 1", stamp, n)
	}
	if n := j.effectsOn(subject); n != 251 {
		t.Fatalf("rail effects on %s: %d, want 251 (ours and the fillers)", subject, n)
	}
	fs, err = e.store.FindingsFor(ctx, key)
	if err != nil || len(fs) == 0 {
		t.Fatalf("findings: %+v %v", fs, err)
	}
	for _, f := range fs {
		if f.Outcome == ledger.FindingAbsent || (f.PaginationExhausted && f.Outcome != ledger.FindingApplied) {
			t.Fatalf("a finding claims absence: %+v", f)
		}
	}
	if last := fs[len(fs)-1]; last.Outcome != ledger.FindingApplied || last.Pages < 3 || last.EntityID != entity {
		t.Fatalf("last finding %+v: want found_applied of %s on page 3 or later", last, entity)
	}

	// The restarted reconciler listed from page 1 again, and only once the
	// dead one's claim had lapsed.
	after := midpageListings(j, subject, len(atKill.Requests))
	var firstPage1 *journalRequest
	for i := range after {
		if !after[i].page2() {
			firstPage1 = &after[i]
			break
		}
	}
	if firstPage1 == nil {
		t.Fatalf("no listing from page 1 after the restart: %+v", after)
	}
	if firstPage1.Time.Before(claimExpires) {
		t.Fatalf("page 1 listed again at %s, before the dead claim lapsed at %s",
			firstPage1.Time.Format(time.StampMilli), claimExpires.Format(time.StampMilli))
	}
	if pages := len(after); pages < 3 {
		t.Fatalf("after the restart the rail saw %d listing pages, want 3: %+v", pages, after)
	}
	t.Logf("re-listed from page 1 at %s, %s after the kill; settled %s with %s",
		firstPage1.Time.Format(time.StampMilli), firstPage1.Time.Sub(killedAt).Round(time.Second), its[0].State, entity)

	// The agent's retry of the identical refund is answered from the
	// ledger without touching the rail. The rail's own answer was lost;
	// the answer is the refund as the reconciler read it from the listing.
	posts := j.posts()
	r := e.stripeRefund(nil, refund)
	var got struct {
		ID       string            `json:"id"`
		Object   string            `json:"object"`
		Amount   int64             `json:"amount"`
		Metadata map[string]string `json:"metadata"`
	}
	if r.Status != 200 || r.Header.Get("x-countersign-replay") != "true" || r.Header.Get("x-countersign-settled-by") != "reconciliation" ||
		json.Unmarshal([]byte(r.Body), &got) != nil || got.ID != entity || got.Object != "refund" || got.Amount != amount ||
		got.Metadata["countersign_sik"] != stamp {
		t.Fatalf("retry after settlement: %d %v %s", r.Status, r.Header, r.Body)
	}
	j = e.journal()
	if n := j.posts(); n != posts {
		t.Fatalf("the retry reached the rail: %d refund POSTs before it, %d after", posts, n)
	}
	if n := j.effectsWithStamp(stamp); n != 1 {
		t.Fatalf("after the retry, rail effects carrying stamp %s: %d, want 1", stamp, n)
	}
	if n := j.effectsOn(subject); n != 251 {
		t.Fatalf("after the retry, rail effects on %s: %d, want 251", subject, n)
	}
}

// page2 reports whether the request asked for a page after the first.
func (r journalRequest) page2() bool {
	q, _ := url.ParseQuery(r.Query)
	return q.Get("starting_after") != ""
}

// effectsWithStamp counts the effects stamped with stamp, in the body or
// as the idempotency key.
func (j journal) effectsWithStamp(stamp string) int {
	n := 0
	for _, f := range j.Effects {
		if f.Metadata["countersign_sik"] == stamp || f.IdempotencyKey == stamp {
			n++
		}
	}
	return n
}

// posts counts the refund POSTs the rail answered.
func (j journal) posts() int {
	n := 0
	for _, r := range j.Requests {
		if r.Method == http.MethodPost && r.Path == "/v1/refunds" {
			n++
		}
	}
	return n
}

// midpageListings returns the refund listings of subject the rail answered,
// from the from-th journaled request on. (The rail journals a request when
// it answers it, so a held page is not among them.)
func midpageListings(j journal, subject string, from int) []journalRequest {
	var out []journalRequest
	for _, r := range j.Requests[min(from, len(j.Requests)):] {
		q, _ := url.ParseQuery(r.Query)
		if r.Method == http.MethodGet && r.Path == "/v1/refunds" && q.Get("payment_intent") == subject {
			out = append(out, r)
		}
	}
	return out
}

// midpageFaultsLeft is how many fault rules mockrail has not used up.
func midpageFaultsLeft(t *testing.T, e *railEnv) int {
	t.Helper()
	resp, err := http.Get(e.mock + "/_mock/fault")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var set struct {
		Rules []json.RawMessage `json:"rules"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil {
		t.Fatal(err)
	}
	return len(set.Rules)
}

// midpageClaim reads who holds the intent's reconcile claim and until when.
func midpageClaim(t *testing.T, dbURL string, k ledger.Key) (string, time.Time) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var owner *string
	var expires *time.Time
	if err := conn.QueryRow(ctx, `SELECT reconcile_owner, reconcile_expires FROM intents WHERE rail_account = $1 AND sik = $2`,
		k.RailAccount, k.SIK).Scan(&owner, &expires); err != nil {
		t.Fatal(err)
	}
	if owner == nil || expires == nil {
		return "", time.Time{}
	}
	return *owner, *expires
}
