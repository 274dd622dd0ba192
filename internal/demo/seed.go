package demo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// demo is what `dev` seeds once and keeps (0600, in the dev directory): the
// owner, the agent and its credentials persist across runs. Runs counts
// them, so that every run refunds payments of its own.
type demo struct {
	OwnerToken    string `json:"owner_token"`
	AgentID       string `json:"agent_id"`
	ExecuteSecret string `json:"execute_secret"`
	ProposeSecret string `json:"propose_secret"`
	Runs          int    `json:"runs"`
}

// The demo mandates' per-refund maxima and the demo payments' amounts, in
// minor units.
const (
	stripeMaxRefund   = 50000  // 500.00 USD
	razorpayMaxRefund = 500000 // 5,000.00 INR
	stripePayment     = 250000 // 2,500.00 USD
	razorpayPayment   = 500000 // 5,000.00 INR
)

// run is one run of the demo: the payments that exist on the mock rail for
// it, and nowhere else. The ledger keeps every earlier run's intents; a
// payment of this run has none, so the printed commands show ALLOW, the
// replay, HOLD and BLOCK again instead of yesterday's answers.
type run struct {
	N               int
	StripePayment   string
	RazorpayPayment string
}

// newRun names this run's payments: the run number, for a person, and a
// random tag, so that a dev directory whose demo.json was removed (the
// counter starting again) never meets an earlier run's intents.
func newRun(n int) run {
	tag := strings.ToLower(rand.Text()[:4]) // [a-z2-7]: a rail id's bytes
	return run{
		N:               n,
		StripePayment:   fmt.Sprintf("pi_demo_%d_%s", n, tag),
		RazorpayPayment: fmt.Sprintf("pay_demo_%d_%s", n, tag),
	}
}

// payments are the run's payments as the mock rail holds them.
func (r run) payments() []mockrail.Payment {
	return []mockrail.Payment{
		{Rail: mockrail.Stripe, ID: r.StripePayment, Amount: stripePayment, Currency: "usd"},
		{Rail: mockrail.Razorpay, ID: r.RazorpayPayment, Amount: razorpayPayment, Currency: "INR"},
	}
}

// loadDemo reads the dev directory's demo.json, counts this run in it and
// writes it back. A missing or unreadable file is a first run: seeding
// happens later, against the ledger.
func loadDemo(dir string) (demo, run, error) {
	var d demo
	if b, err := os.ReadFile(filepath.Join(dir, "demo.json")); err == nil {
		if json.Unmarshal(b, &d) != nil || d.OwnerToken == "" {
			d = demo{}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return demo{}, run{}, err
	}
	d.Runs++
	return d, newRun(d.Runs), nil
}

func saveDemo(dir string, d demo) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "demo.json"), b, 0o600)
}

// seedDemo creates, once, a demo owner, an agent, two credentials (execute
// and propose), and makes sure the agent has a refund mandate on each rail
// account (a dev directory from before Razorpay was in the demo gets its
// mandate now). It saves d, which keeps the secrets.
func seedDemo(ctx context.Context, store *ledger.Store, dir string, d demo) (demo, error) {
	if d.OwnerToken != "" {
		// demo.json outlived its ledger (a cluster kept in the temporary
		// directory is gone after a reboot): seed again.
		if _, err := store.AgentOwner(ctx, d.AgentID); errors.Is(err, ledger.ErrNotFound) {
			d = demo{Runs: d.Runs}
		} else if err != nil {
			return demo{}, err
		}
	}
	if d.OwnerToken == "" {
		runs := d.Runs
		owner, token, _, err := ownerauth.Bootstrap(ctx, store, "demo owner", 365*24*time.Hour)
		if err != nil {
			return demo{}, err
		}
		agent, err := store.CreateAgent(ctx, owner.ID, "demo refund agent")
		if err != nil {
			return demo{}, err
		}
		d = demo{OwnerToken: token, AgentID: agent.ID, Runs: runs}
		for _, c := range []struct {
			scope  credential.Scope
			secret *string
		}{{credential.ScopeExecute, &d.ExecuteSecret}, {credential.ScopePropose, &d.ProposeSecret}} {
			secret, hash, err := credential.Generate()
			if err != nil {
				return demo{}, err
			}
			if _, err := store.IssueCredential(ctx, agent.ID, c.scope, time.Now().Add(365*24*time.Hour), hash); err != nil {
				return demo{}, err
			}
			*c.secret = secret
		}
	}
	for _, m := range []struct {
		rail     countersignv1.Rail
		account  string
		max      int64
		currency string
	}{
		{countersignv1.Rail_RAIL_STRIPE, devStripeAccount, stripeMaxRefund, "USD"},
		{countersignv1.Rail_RAIL_RAZORPAY, devRazorpayAccount, razorpayMaxRefund, "INR"},
	} {
		if err := ensureMandate(ctx, store, d.AgentID, m.rail, m.account, m.max, m.currency); err != nil {
			return demo{}, err
		}
	}
	return d, saveDemo(dir, d)
}

// ensureMandate creates a budgeted refund mandate for the agent on account
// unless one is active.
func ensureMandate(ctx context.Context, store *ledger.Store, agentID string, r countersignv1.Rail, account string, max int64, currency string) error {
	// The operator's part: the demo owner holds the demo's rail accounts.
	owner, err := store.AgentOwner(ctx, agentID)
	if err != nil {
		return err
	}
	if _, err := store.GrantRailAccount(ctx, account, owner); err != nil {
		return err
	}
	now := time.Now().Truncate(time.Second)
	_, err = store.ActiveMandate(ctx, agentID, account, now)
	if err == nil || !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	m := &countersignv1.Mandate{Rail: r, RailAccount: account, AgentId: agentID,
		Purpose: "demo: refunds for support tickets", ValidFrom: timestamppb.New(now.Add(-time.Minute)),
		ValidUntil: timestamppb.New(now.Add(365 * 24 * time.Hour)), Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: max, Currencies: []string{currency}}},
		// A budget and a window far above what the demo's runs spend, so
		// the owner console has usage to draw and none of them is refused.
		Budgets: []*countersignv1.Money{{AmountMinor: 2000 * max, Currency: currency}},
		Windows: []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour), MaxCalls: 600}}}
	rec, err := mandate.Record(m)
	if err != nil {
		return err
	}
	_, err = store.CreateMandate(ctx, rec)
	return err
}
