package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestRailKeyNeverLeaves (C1): after refunds that applied, were refused and
// were replayed, the rail's secret key appears nowhere the agent, the
// owner or an operator can read: not in countersign's logs (at debug
// level), not in any ledger table, not in an API answer.
func TestRailKeyNeverLeaves(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_custody", 10000, "usd")
	for _, amount := range []string{"1000", "1000", "999999"} { // applied, replayed, refused
		e.stripeRefund(nil, url.Values{"payment_intent": {"pi_custody"}, "amount": {amount}})
	}
	its := e.settle("pi_custody", 10*time.Second)

	// API answers.
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+e.secret)
	client := countersignv1.NewDecisionServiceClient(conn)
	var answers []string
	gi, err := client.GetIntent(ctx, &countersignv1.DecisionServiceGetIntentRequest{RailAccount: stripeAccount, Sik: its[0].SIK})
	if err != nil {
		t.Fatal(err)
	}
	answers = append(answers, gi.String())
	amount := int64(500)
	dr, err := client.Decide(ctx, &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: &countersignv1.ProposedAction{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: stripeAccount, ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND,
		Subject: "pi_custody", AmountMinor: &amount}}})
	if err != nil {
		t.Fatal(err)
	}
	answers = append(answers, dr.String())

	// Every ledger table, as JSON.
	db, err := pgx.Connect(context.Background(), e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	tables := []string{"decisions", "intents", "attempts", "audit_records", "reconciliation_findings", "budget_holds", "approvals", "intent_aliases"}
	var dump strings.Builder
	for _, tbl := range tables {
		rows, err := db.Query(context.Background(), `SELECT row_to_json(t)::text FROM `+tbl+` t`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			dump.WriteString(s)
		}
		rows.Close()
	}
	attemptsDump := dump.String()
	if !strings.Contains(attemptsDump, "pi_custody") {
		t.Fatal("the dump is empty: the search proves nothing")
	}
	// bytea columns come out hex-encoded in JSON; search for the key in hex too.
	hexKey := ""
	for _, c := range []byte(stripeKey) {
		hexKey += string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])
	}
	places := map[string]string{
		"countersign's logs": e.countersig.out.String(),
		"the ledger":         attemptsDump,
		"API answers":        strings.Join(answers, "\n"),
	}
	for where, text := range places {
		if strings.Contains(text, stripeKey) || strings.Contains(strings.ToLower(text), hexKey) {
			t.Errorf("the rail key appears in %s", where)
		}
	}
	if !strings.Contains(e.countersig.out.String(), "committed") {
		t.Fatal("countersign logged nothing at debug level: the log search proves nothing")
	}
}
