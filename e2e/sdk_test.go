package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestStripeSDKAgainstTheDemo drives `countersign-dev dev` (what `make run`
// starts) with the official Stripe Go SDK, unmodified, configured as a
// newcomer would from what the demo prints: the API key is the printed
// agent credential and the backend URL the printed base URL. A refund
// succeeds; the identical refund again, with the SDK's own fresh
// Idempotency-Key, is the ledger's replay of the same refund; a refund above
// the mandate's maximum reaches the SDK as a *stripe.Error carrying the
// refusal's code and message.
func TestStripeSDKAgainstTheDemo(t *testing.T) {
	d := startDemo(t)
	allow, block := curlForm(t, d.step(t, "ALLOW", 0)), curlForm(t, d.step(t, "BLOCK", 0))
	sc := stripe.NewClient(d.stripeKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:           stripe.String(d.stripeBase),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refund := func(form url.Values) (*stripe.Refund, error) {
		return sc.V1Refunds.Create(ctx, &stripe.RefundCreateParams{
			PaymentIntent: stripe.String(form.Get("payment_intent")),
			Amount:        stripe.Int64(atoi(t, form.Get("amount"))),
		})
	}

	first, err := refund(allow)
	if err != nil {
		t.Fatalf("refund: %v", err)
	}
	if !strings.HasPrefix(first.ID, "re_") || first.Amount != atoi(t, allow.Get("amount")) ||
		first.Status != stripe.RefundStatusSucceeded || first.PaymentIntent == nil || first.PaymentIntent.ID != allow.Get("payment_intent") {
		t.Fatalf("refund = %+v", first)
	}
	if h := first.LastResponse.Header.Get("X-Countersign-Replay"); h != "" {
		t.Fatalf("the first refund is marked a replay (%q)", h)
	}

	again, err := refund(allow)
	if err != nil {
		t.Fatalf("identical refund: %v", err)
	}
	if again.ID != first.ID || again.Amount != first.Amount {
		t.Fatalf("identical refund = %s (%d), want the replay of %s (%d)", again.ID, again.Amount, first.ID, first.Amount)
	}
	if h := again.LastResponse.Header.Get("X-Countersign-Replay"); h != "true" {
		t.Fatalf("the identical refund is not marked a replay: X-Countersign-Replay %q", h)
	}
	// The replay came from the ledger: the rail made one refund, and saw one refund request.
	j := d.journal(t)
	var effects, posts int
	for _, e := range j.Effects {
		if e.Kind == mockrail.KindRefund && e.Subject == allow.Get("payment_intent") {
			effects++
		}
	}
	for _, r := range j.Requests {
		if r.Method == http.MethodPost && strings.HasPrefix(r.Path, "/v1/refunds") {
			posts++
		}
	}
	if effects != 1 || posts != 1 {
		t.Fatalf("the rail made %d refunds of %s and saw %d refund requests, want 1 and 1", effects, allow.Get("payment_intent"), posts)
	}

	_, err = refund(block)
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("refund above the mandate: err = %v (%T), want a *stripe.Error", err, err)
	}
	// The SDK reports what the agent would see without it.
	status, _, body := send(t, curlRequest(t, d.step(t, "BLOCK", 0)))
	var want struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &want); err != nil || status != http.StatusForbidden {
		t.Fatalf("printed BLOCK command: %d %s", status, body)
	}
	if se.HTTPStatusCode != http.StatusForbidden || string(se.Type) != want.Error.Type || string(se.Code) != "amount_above_maximum" ||
		string(se.Code) != want.Error.Code || se.Msg != want.Error.Message || se.Msg == "" {
		t.Fatalf("stripe.Error = status %d type %q code %q message %q; the refusal is %s", se.HTTPStatusCode, se.Type, se.Code, se.Msg, body)
	}
}

// demoRun is a started `countersign-dev dev` and what it printed.
type demoRun struct {
	p                                           *proc
	args                                        []string
	dir, grpcAddr, httpAddr, mockAddr           string
	stripeBase, stripeKey                       string
	razorpayBase, razorpayKeyID, razorpaySecret string
	// steps are the printed demo's commands, under the first word of
	// the comment that introduces them ("ALLOW", "REPLAY", "BLOCK", "HOLD",
	// "Razorpay").
	steps map[string][]string
}

// startDemo runs the demo in a fresh directory on free ports.
func startDemo(t *testing.T) *demoRun {
	t.Helper()
	dir, err := os.MkdirTemp("", "countersign-e2e-dev-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The postgres OS user (used when tests run as root) must reach the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := &demoRun{dir: dir, grpcAddr: freeAddr(t), httpAddr: freeAddr(t), mockAddr: freeAddr(t)}
	d.args = []string{"dev", "--dir", dir, "--grpc-addr", d.grpcAddr, "--http-addr", d.httpAddr,
		"--mockrail-addr", d.mockAddr, "--egress-addr", freeAddr(t), "--razorpay-egress-addr", freeAddr(t)}
	d.start(t, d.args)
	return d
}

// start runs the demo binary with args and reads what it prints.
func (d *demoRun) start(t *testing.T, args []string) {
	t.Helper()
	d.p = startProc(t, "countersign-dev", nil, args...)
	waitStatus(t, "http://"+d.httpAddr+"/readyz", 200, 90*time.Second)
	out := waitOutput(t, d.p, "Ctrl-C stops", 10*time.Second)
	find := func(re string) []string {
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("dev output lacks %s:\n%s", re, out)
		}
		return m
	}
	d.stripeBase = find(`(?m)^\s+Stripe\s+API base URL\s+(\S+)`)[1]
	d.stripeKey = find(`(?m)^\s+API key\s+(\S+)`)[1]
	d.razorpayBase = find(`(?m)^\s+Razorpay\s+API base URL\s+(\S+)`)[1]
	m := find(`(?m)^\s+key_id:key_secret\s+([^:\s]+):(\S+)`)
	d.razorpayKeyID, d.razorpaySecret = m[1], m[2]
	d.steps = map[string][]string{}
	heading := regexp.MustCompile(`^  # (\w+)`)
	step := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case heading.MatchString(line):
			step = heading.FindStringSubmatch(line)[1]
		case strings.TrimSpace(line) == "":
			step = ""
		case step != "":
			cmd, _, _ := strings.Cut(strings.TrimSpace(line), "   # ")
			d.steps[step] = append(d.steps[step], cmd)
		}
	}
}

// step is the i-th command of a printed step.
func (d *demoRun) step(t *testing.T, name string, i int) string {
	t.Helper()
	if len(d.steps[name]) <= i {
		t.Fatalf("the demo printed %d commands under %q, want at least %d: %q", len(d.steps[name]), name, i+1, d.steps)
	}
	return d.steps[name][i]
}

// journal is the mock rail's record of what it did.
func (d *demoRun) journal(t *testing.T) mockrail.Journal {
	t.Helper()
	resp, err := http.Get("http://" + d.mockAddr + "/_mock/journal")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var j mockrail.Journal
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		t.Fatal(err)
	}
	return j
}

// waitOutput waits until p has printed want and returns its output.
func waitOutput(t *testing.T, p *proc, want string, within time.Duration) string {
	t.Helper()
	if !wait.Until(within, func() bool { return strings.Contains(p.out.String(), want) }) {
		t.Fatalf("output lacks %q after %s:\n%s", want, within, p.out.String())
	}
	return p.out.String()
}

// shellWords splits a printed command as a POSIX shell would, for what the
// demo prints: words separated by spaces, single quotes taken literally.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, c := range line {
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteRune(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == ' ':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// curlRequest is the request a printed curl command sends (-s, -H, -d, -u
// and the URL: what the demo prints).
func curlRequest(t *testing.T, line string) *http.Request {
	t.Helper()
	words := shellWords(line)
	if len(words) == 0 || words[0] != "curl" {
		t.Fatalf("not a curl command: %q", line)
	}
	var target string
	var data []string
	header := http.Header{}
	for i := 1; i < len(words); i++ {
		arg := func() string {
			i++
			if i >= len(words) {
				t.Fatalf("%s without a value in %q", words[i-1], line)
			}
			return words[i]
		}
		switch w := words[i]; w {
		case "-s":
		case "-H":
			k, v, _ := strings.Cut(arg(), ":")
			header.Set(k, strings.TrimSpace(v))
		case "-d":
			data = append(data, arg())
		case "-u":
			header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(arg())))
		default:
			if strings.HasPrefix(w, "-") || target != "" {
				t.Fatalf("unexpected %q in %q", w, line)
			}
			target = w
		}
	}
	method, body := http.MethodGet, io.Reader(nil)
	if data != nil {
		method, body = http.MethodPost, strings.NewReader(strings.Join(data, "&"))
		if header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	return req
}

// curlForm is the form a printed curl command posts.
func curlForm(t *testing.T, line string) url.Values {
	t.Helper()
	b, err := io.ReadAll(curlRequest(t, line).Body)
	if err != nil {
		t.Fatal(err)
	}
	form, err := url.ParseQuery(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return form
}

// send sends req and returns the status, headers and body.
func send(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
