package server

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestRevocationStopsTheVeryNextDecision races revocations against a
// stream of refunds through ext_authz: once RevokeCredential, RevokeAgent or
// RevokeMandate has returned, no request that starts after it is allowed.
// Decisions read the credential and mandate fresh (never from a cache),
// and every writing transaction (the fresh write and the locking one it
// falls back to) share-locks them again and refuses on what it finds, so a
// revocation waits for the decisions writing at that moment and every
// later write sees it (internal/engine's TestRevocationBetweenReadAndWrite
// revokes between one decision's read and its write).
func TestRevocationStopsTheVeryNextDecision(t *testing.T) {
	for _, revoke := range []string{"credential", "agent", "mandate", "rail account"} {
		t.Run(revoke, func(t *testing.T) {
			h := bareRailHarness(t, unlimitedAgent)
			m := mandateFor(h)
			// Limits that accumulate: decisions take the mandate's lock.
			m.Budgets = []*countersignv1.Money{{AmountMinor: 1 << 40, Currency: "USD"}}
			m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour), MaxCalls: 100000}}
			// Every fourth request is above the per-action maximum: refused
			// by the early limits, on facts the engine remembers unread.
			const maxRefund = 1 << 30
			m.Grants[0].MaxAmountMinor = maxRefund
			hash := applyMandateTo(t, h, m)
			ctx := context.Background()
			credHash, err := credential.Hash(h.secret)
			if err != nil {
				t.Fatal(err)
			}
			p, err := h.store.LookupCredential(ctx, credHash)
			if err != nil {
				t.Fatal(err)
			}

			type sent struct {
				start     time.Time
				allowed   bool
				reason    string
				overLimit bool
			}
			var (
				mu        sync.Mutex
				log       []sent
				allowed   atomic.Int64
				revokedAt atomic.Pointer[time.Time]
				after     atomic.Int64 // requests started after the revocation returned
				next      atomic.Int64
				wg        sync.WaitGroup
			)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for after.Load() < 200 {
						i := next.Add(1)
						amount := i
						if i%4 == 0 {
							amount = maxRefund + i
						}
						start := time.Now()
						resp, err := h.client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
							ContextExtensions: map[string]string{"rail_account": "acct_bench"},
							Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
								Id: "revoke-" + strconv.FormatInt(i, 10), Method: "POST", Host: "stripe.local", Path: "/v1/refunds",
								Headers: map[string]string{"authorization": "Bearer " + h.secret, "content-type": "application/x-www-form-urlencoded"},
								Body:    "payment_intent=pi_bench&amount=" + strconv.FormatInt(amount, 10),
							}},
						}})
						if err != nil {
							t.Errorf("Check: %v", err)
							return
						}
						s := sent{start: start, allowed: codes.Code(resp.GetStatus().GetCode()) == codes.OK, overLimit: amount > maxRefund}
						if !s.allowed {
							_, s.reason = deniedCode(t, resp)
						}
						if s.allowed {
							allowed.Add(1)
						}
						if r := revokedAt.Load(); r != nil && start.After(*r) {
							after.Add(1)
						}
						mu.Lock()
						log = append(log, s)
						mu.Unlock()
					}
				}()
			}
			if !wait.Until(30*time.Second, func() bool { return allowed.Load() >= 30 }) {
				t.Fatalf("refunds before the revocation: %d allowed within 30s", allowed.Load())
			}
			switch revoke {
			case "credential":
				err = h.store.RevokeCredential(ctx, p.Credential.ID)
			case "agent":
				err = h.store.RevokeAgent(ctx, h.agentID)
			case "mandate":
				_, err = h.store.RevokeMandate(ctx, hash, "revoked by the race test")
			case "rail account":
				_, err = h.store.RevokeRailAccount(ctx, "acct_bench", h.ownerID)
			}
			if err != nil {
				t.Fatalf("revoke %s: %v", revoke, err)
			}
			r := time.Now()
			revokedAt.Store(&r)
			wg.Wait()

			mu.Lock()
			defer mu.Unlock()
			var before, later, overBefore int
			reasons := map[string]int{} // of the refusals after the revocation
			for _, s := range log {
				if !s.start.After(r) {
					if s.allowed {
						before++
					}
					if s.overLimit && !s.allowed {
						overBefore++
					}
					continue
				}
				later++
				if s.allowed {
					t.Errorf("a request started %s after the %s was revoked was allowed", s.start.Sub(r), revoke)
				}
				reasons[s.reason]++
			}
			if before < 30 || later < 200 || overBefore < 5 {
				t.Fatalf("%d allowed before, %d over the limit refused before, %d sent after the revocation: the race did not run", before, overBefore, later)
			}
			// Every request after it, above the limit or not, is refused for
			// the revocation: none for a limit of a mandate remembered from
			// before it.
			if len(reasons) != 1 {
				t.Errorf("refusals after the %s was revoked: %v, want one reason for all", revoke, reasons)
			}
		})
	}
}
