package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/envoystandin"
)

// demo is what `countersign dev` seeds once and keeps (0600, in the dev
// directory) so a rerun prints the same commands.
type demo struct {
	OwnerToken    string `json:"owner_token"`
	AgentID       string `json:"agent_id"`
	ExecuteSecret string `json:"execute_secret"`
	ProposeSecret string `json:"propose_secret"`
}

// seedDemo creates a demo owner, agent, two credentials (execute and
// propose) and a mandate on the mock rail's Stripe account, once.
func seedDemo(ctx context.Context, store *ledger.Store, dir string) (demo, error) {
	path := filepath.Join(dir, "demo.json")
	if b, err := os.ReadFile(path); err == nil {
		var d demo
		if err := json.Unmarshal(b, &d); err == nil && d.OwnerToken != "" {
			return d, nil
		}
	}
	owner, token, _, err := ownerauth.Bootstrap(ctx, store, "demo owner", 365*24*time.Hour)
	if err != nil {
		return demo{}, err
	}
	agent, err := store.CreateAgent(ctx, owner.ID, "demo refund agent")
	if err != nil {
		return demo{}, err
	}
	d := demo{OwnerToken: token, AgentID: agent.ID}
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
	now := time.Now().Truncate(time.Second)
	m := &countersignv1.Mandate{Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: devStripeAccount, AgentId: agent.ID,
		Purpose: "demo: refunds for support tickets", ValidFrom: timestamppb.New(now.Add(-time.Minute)),
		ValidUntil: timestamppb.New(now.Add(365 * 24 * time.Hour)), Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 50000, Currencies: []string{"USD"}}}}
	rec, err := mandate.Record(m)
	if err != nil {
		return demo{}, err
	}
	if _, err := store.CreateMandate(ctx, rec); err != nil {
		return demo{}, err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return demo{}, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return demo{}, err
	}
	return d, nil
}

// startDevEgress runs the Envoy-contract egress proxy in front of the mock
// rail, so the demo's curl commands take the path an agent's SDK would.
func startDevEgress(ctx context.Context, listen, grpcAddr, mockURL string) (*envoystandin.Proxy, error) {
	return envoystandin.Start(ctx, envoystandin.Config{
		Listen: listen, ExtAuthz: grpcAddr, ExtProc: grpcAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
		StatusOnError: 503, Timeout: 5 * time.Second, ExtProcMessageTimeout: 5 * time.Second,
		Routes: []envoystandin.Route{{Prefix: "stripe.local", Upstream: mockURL, HostRewrite: "api.stripe.com",
			ContextExtensions: map[string]string{"rail_account": devStripeAccount}}},
	})
}

func printDemo(w io.Writer, d demo, egressAddr, grpcAddr string) {
	curl := func(secret string, amount int) string {
		return fmt.Sprintf("curl -s http://%s/v1/refunds -H 'Host: stripe.local' -H 'Authorization: Bearer %s' -d payment_intent=pi_demo_1 -d amount=%d", egressAddr, secret, amount)
	}
	owner := fmt.Sprintf("--server %s --owner-token %s", grpcAddr, d.OwnerToken)
	fmt.Fprintf(w, "Demo (agent %s, mandate: refunds up to 500.00 USD each on %s):\n\n", d.AgentID, devStripeAccount)
	fmt.Fprintf(w, "  # ALLOW: a refund within the mandate goes to the (mock) rail, stamped; again, and you get the stored answer\n  %s\n\n", curl(d.ExecuteSecret, 1500))
	fmt.Fprintf(w, "  # BLOCK: above the mandate's 50000 per refund\n  %s\n\n", curl(d.ExecuteSecret, 60000))
	fmt.Fprintf(w, "  # HOLD → approve → ALLOW: a propose-only credential waits for the owner\n  %s\n", curl(d.ProposeSecret, 2500))
	fmt.Fprintf(w, "  go run ./cmd/countersign approvals list %s\n", owner)
	fmt.Fprintf(w, "  go run ./cmd/countersign approvals approve APPROVAL_ID %s\n", owner)
	fmt.Fprintf(w, "  %s   # the identical request, now allowed once\n\n", curl(d.ProposeSecret, 2500))
}
