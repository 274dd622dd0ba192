package demo

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/countersign/countersign/internal/money"
)

// Amounts the printed commands send, in minor units.
const (
	allowAmount    = 1500  // 15.00 USD
	holdAmount     = 2500  // 25.00 USD
	blockAmount    = 60000 // 600.00 USD, above stripeMaxRefund
	razorpayAmount = 10000 // 100.00 INR
)

// printSDK prints, for each rail, the two settings an unmodified SDK needs:
// its API base URL and the key to set, which is the agent's Countersign
// credential. Stripe's SDKs send the key as "Authorization: Bearer <key>";
// Razorpay's send HTTP Basic "<key_id>:<key_secret>", of which Countersign
// takes the secret as the credential (internal/extauthz credentialFrom) and
// checks nothing else, so any key_id will do: the agent id reads well.
func printSDK(w io.Writer, d demo, stripe, razorpay *egressRail) {
	fmt.Fprintf(w, "Point an unmodified rail SDK at Countersign's egress; the agent's Countersign credential goes where the rail key would:\n")
	fmt.Fprintf(w, "  Stripe    API base URL       %s   (instead of https://%s)\n", stripe.BaseURL(), stripe.RailHost)
	fmt.Fprintf(w, "            API key            %s   (sent as Authorization: Bearer)\n", d.ExecuteSecret)
	fmt.Fprintf(w, "  Razorpay  API base URL       %s   (instead of https://%s)\n", razorpay.BaseURL(), razorpay.RailHost)
	fmt.Fprintf(w, "            key_id:key_secret  %s:%s   (HTTP Basic; the secret is the credential, the key_id is not checked)\n\n", d.AgentID, d.ExecuteSecret)
}

// printDemo prints this run's commands: each shows its verdict on this run,
// because the payments are this run's own.
func printDemo(w io.Writer, d demo, r run, stripe, razorpay *egressRail, grpcAddr, cli string) {
	curl := func(secret string, amount int64) string {
		return fmt.Sprintf("curl -s %s/v1/refunds -H 'Authorization: Bearer %s' -d payment_intent=%s -d amount=%d",
			stripe.BaseURL(), secret, r.StripePayment, amount)
	}
	owner := fmt.Sprintf("--server %s --owner-token %s", grpcAddr, d.OwnerToken)
	fmt.Fprintf(w, "Demo, run %d (agent %s; mandates: refunds up to %s each on %s, up to %s each on %s).\n",
		r.N, d.AgentID, major(stripeMaxRefund, "USD"), devStripeAccount, major(razorpayMaxRefund, "INR"), devRazorpayAccount)
	fmt.Fprintf(w, "Every run refunds payments of its own: %s (%s) and %s (%s). Add -i to curl to see X-Countersign-Verdict.\n\n",
		r.StripePayment, major(stripePayment, "USD"), r.RazorpayPayment, major(razorpayPayment, "INR"))
	fmt.Fprintf(w, "  # ALLOW: a refund of %s within the mandate goes to the (mock) rail, stamped\n  %s\n\n",
		major(allowAmount, "USD"), curl(d.ExecuteSecret, allowAmount))
	fmt.Fprintf(w, "  # REPLAY: the identical refund again is answered from the ledger (the same re_… id, X-Countersign-Replay: true); the rail is not called\n  %s\n\n",
		curl(d.ExecuteSecret, allowAmount))
	fmt.Fprintf(w, "  # BLOCK: %s is above the mandate's %s per refund; nothing reaches the rail\n  %s\n\n",
		major(blockAmount, "USD"), major(stripeMaxRefund, "USD"), curl(d.ExecuteSecret, blockAmount))
	fmt.Fprintf(w, "  # HOLD → approve → ALLOW: a propose-only credential's refund of %s waits for the owner\n  %s\n",
		major(holdAmount, "USD"), curl(d.ProposeSecret, holdAmount))
	fmt.Fprintf(w, "  %s approvals list %s\n", cli, owner)
	fmt.Fprintf(w, "  %s approvals approve APPROVAL_ID %s\n", cli, owner)
	fmt.Fprintf(w, "  %s   # the identical request, now allowed once\n\n", curl(d.ProposeSecret, holdAmount))
	fmt.Fprintf(w, "  # Razorpay, on its own listener: a refund of %s (HTTP Basic key_id:key_secret)\n", major(razorpayAmount, "INR"))
	fmt.Fprintf(w, "  curl -s %s/v1/payments/%s/refund -u %s:%s -H 'Content-Type: application/json' -d '{\"amount\":%d}'\n\n",
		razorpay.BaseURL(), r.RazorpayPayment, d.AgentID, d.ExecuteSecret, razorpayAmount)
}

// major writes minor units as a person reads them: 250000, "USD" is
// "2,500.00 USD".
func major(minor int64, currency string) string { return money.Format(minor, currency) }

// cliCommand is how a person at the same prompt runs this binary's owner
// commands: countersign-dev carries every countersign command, so its own
// path (relative to the working directory when it is under it, as
// ./bin/countersign-dev after `make run`). A binary `go run` built in a
// temporary directory is printed as `go run ./cmd/countersign`.
func cliCommand(exe, wd string) string {
	if exe == "" || strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/countersign"
	}
	if wd != "" {
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			return "." + string(filepath.Separator) + rel
		}
	}
	return exe
}
