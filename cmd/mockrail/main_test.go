package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/testing/mockrail"
)

func TestMain(m *testing.M) {
	// signal.Notify starts one process-wide watcher goroutine that never ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("os/signal.loop"))
}

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c config)
		err   string
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			if c.Listen != "127.0.0.1:12111" || c.SeedFile != "" || len(c.Faults) != 0 ||
				c.IdempotencyTTL != mockrail.DefaultIdempotencyTTL || c.ShutdownTimeout != 10*time.Second {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "environment", env: map[string]string{
			"MOCKRAIL_LISTEN": "127.0.0.1:0", "MOCKRAIL_SEED_FILE": "/s.json", "MOCKRAIL_FAULT": "replica_lag:delay=3s;5xx_after_apply:count=1",
			"MOCKRAIL_IDEMPOTENCY_TTL": "1h", "MOCKRAIL_SHUTDOWN_TIMEOUT": "2s", "MOCKRAIL_LOG_LEVEL": "debug",
		}, check: func(t *testing.T, c config) {
			if c.Listen != "127.0.0.1:0" || c.SeedFile != "/s.json" || len(c.Faults) != 2 || c.Faults[1].Count != 1 ||
				c.IdempotencyTTL != time.Hour || c.ShutdownTimeout != 2*time.Second || c.LogLevel.String() != "DEBUG" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "flags win over the environment",
			args: []string{"--listen", "127.0.0.1:9", "--seed-file", "/f.json", "--fault", "slow", "--fault", "none", "--idempotency-ttl", "2m", "--log-level", "warn"},
			env: map[string]string{
				"MOCKRAIL_LISTEN": "127.0.0.1:0", "MOCKRAIL_SEED_FILE": "/s.json", "MOCKRAIL_FAULT": "replica_lag",
				"MOCKRAIL_IDEMPOTENCY_TTL": "1h", "MOCKRAIL_LOG_LEVEL": "debug",
			}, check: func(t *testing.T, c config) {
				if c.Listen != "127.0.0.1:9" || c.SeedFile != "/f.json" || len(c.Faults) != 2 || c.Faults[0].Profile != mockrail.FaultSlow ||
					c.IdempotencyTTL != 2*time.Minute || c.LogLevel.String() != "WARN" {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "bad fault flag", args: []string{"--fault", "explode"}, err: "unknown profile"},
		{name: "bad fault variable", env: map[string]string{"MOCKRAIL_FAULT": "slow;explode"}, err: "MOCKRAIL_FAULT"},
		{name: "bad duration variable", env: map[string]string{"MOCKRAIL_IDEMPOTENCY_TTL": "a day"}, err: "MOCKRAIL_IDEMPOTENCY_TTL"},
		{name: "zero TTL", args: []string{"--idempotency-ttl", "0s"}, err: "TTL must be positive"},
		{name: "bad listen address", args: []string{"--listen", "nohost"}, err: "listen address"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, err: "log level"},
		{name: "stray argument", args: []string{"serve"}, err: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--port", "1"}, err: "flag provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, envOf(tc.env), io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	if _, err := parseConfig([]string{"-h"}, envOf(nil), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

// lineWriter hands each complete line written to it to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 64)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		select {
		case w.lines <- strings.TrimSpace(line):
		default:
		}
	}
}

// address waits for the "listening on" line and returns the base URL.
func (w *lineWriter) address(t *testing.T) string {
	t.Helper()
	select {
	case line := <-w.lines:
		base, ok := strings.CutPrefix(line, "mockrail listening on ")
		if !ok {
			t.Fatalf("first line %q", line)
		}
		return base
	case <-time.After(10 * time.Second):
		t.Fatal("mockrail did not report its address")
		return ""
	}
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(t *testing.T, url string, hdr http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func bearer(key string) http.Header { return http.Header{"Authorization": {"Bearer " + key}} }

// start runs the server until stop is called; its logs go to logs.
func start(t *testing.T, cfg config, logs io.Writer) (base string, stop func() error) {
	t.Helper()
	out := newLineWriter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, out, logs) }()
	base = out.address(t)
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("run did not return after cancel")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return base, stop
}

func testConfig() config {
	return config{Listen: "127.0.0.1:0", IdempotencyTTL: time.Hour, ShutdownTimeout: 5 * time.Second}
}

func TestRunServesSeedAndShutsDown(t *testing.T) {
	seed := filepath.Join(t.TempDir(), "seed.json")
	if err := os.WriteFile(seed, []byte(`{
  "accounts": [{"name": "acme", "rail": "stripe", "secret_key": "sk_test_acme_real"}],
  "payments": [{"rail": "stripe", "id": "pi_9", "amount": 900, "currency": "usd"}]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.SeedFile = seed
	base, stop := start(t, cfg, io.Discard)
	if st, body := get(t, base+"/_mock/healthz", nil); st != 200 {
		t.Fatalf("healthz %d %s", st, body)
	}
	if st, body := get(t, base+"/v1/payment_intents/pi_9", bearer("sk_test_acme_real")); st != 200 || !strings.Contains(string(body), `"amount":900`) {
		t.Fatalf("payment intent %d %s", st, body)
	}
	if st, _ := get(t, base+"/v1/payment_intents/pi_9", bearer(mockrail.DefaultStripeKey)); st != 401 {
		t.Fatalf("default key with a seeded account: %d, want 401", st)
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := client.Get(base + "/_mock/healthz"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

func TestRunFailsOnBadSeed(t *testing.T) {
	cfg := testConfig()
	cfg.SeedFile = filepath.Join(t.TempDir(), "missing.json")
	if err := run(context.Background(), cfg, io.Discard, io.Discard); err == nil {
		t.Fatal("run accepted a missing seed file")
	}
}

// Shutdown does not wait for requests hung by timeout_after_apply.
func TestShutdownCutsOffHungRequests(t *testing.T) {
	cfg := testConfig()
	cfg.Faults = []mockrail.Fault{{Profile: mockrail.FaultTimeoutAfterApply}}
	cfg.LogLevel = slog.LevelDebug // one log line per request, written before the hang
	logs := newLineWriter()
	base, stop := start(t, cfg, logs)

	hung := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", base+"/v1/payouts", strings.NewReader("amount=100&currency=usd"))
		req.Header.Set("Authorization", "Bearer "+mockrail.DefaultStripeKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
			err = errors.New("answered: " + res.Status)
		} else {
			err = nil
		}
		hung <- err
	}()
	// Wait until the payout is applied and its request hangs.
	for applied := false; !applied; {
		select {
		case line := <-logs.lines:
			applied = strings.Contains(line, `"fault":"timeout_after_apply"`) && strings.Contains(line, `"outcome":"applied"`)
		case <-time.After(10 * time.Second):
			t.Fatal("the payout was never applied")
		}
	}
	_, body := get(t, base+"/_mock/journal", nil)
	var j mockrail.Journal
	if err := json.Unmarshal(body, &j); err != nil || len(j.Effects) != 1 {
		t.Fatalf("journal %s (%v)", body, err)
	}
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	if err := <-hung; err != nil {
		t.Fatal(err)
	}
}

// SIGINT and SIGTERM stop the process with exit code 0.
func TestSignalsShutDownGracefully(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			out := newLineWriter()
			code := make(chan int, 1)
			go func() {
				code <- realMain([]string{"--listen", "127.0.0.1:0"}, envOf(nil), out, io.Discard)
			}()
			base := out.address(t) // printed after the signal handler is installed
			if st, _ := get(t, base+"/_mock/healthz", nil); st != 200 {
				t.Fatalf("healthz %d", st)
			}
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			select {
			case c := <-code:
				if c != 0 {
					t.Fatalf("exit code %d", c)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("no exit after the signal")
			}
		})
	}
}

func TestRealMainExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"help", []string{"-h"}, 0},
		{"bad flag", []string{"--nope"}, 2},
		{"listen fails", []string{"--listen", "256.0.0.1:1"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if c := realMain(tc.args, envOf(nil), io.Discard, io.Discard); c != tc.code {
				t.Fatalf("exit code %d, want %d", c, tc.code)
			}
		})
	}
}

// The example seed shipped next to the binary stays loadable.
func TestExampleSeedLoads(t *testing.T) {
	seed, err := mockrail.LoadSeed("seed.example.json")
	if err != nil {
		t.Fatal(err)
	}
	rail, err := mockrail.New(mockrail.WithSeed(seed))
	if err != nil {
		t.Fatal(err)
	}
	defer rail.Close()
	if len(rail.Accounts()) != 2 || len(rail.Payments()) != 3 || len(rail.Faults()) != 1 {
		t.Fatalf("accounts %+v payments %+v faults %+v", rail.Accounts(), rail.Payments(), rail.Faults())
	}
}
