package e2e

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/chaos"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/results"
)

// chaosProfiles are the rail's faults the kill matrix crosses with every
// kill point (mockrail fault rules; nil = none).
var chaosProfiles = []struct {
	name string
	rule map[string]any
}{
	{"none", nil},
	{"timeout_after_apply", map[string]any{"profile": "timeout_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"}},
	{"reset_before_apply", map[string]any{"profile": "reset_before_apply", "count": 1, "method": "POST", "path": "/v1/refunds"}},
	{"5xx_after_apply", map[string]any{"profile": "5xx_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"}},
	{"replay_other", map[string]any{"profile": "replay_other", "count": 1, "method": "POST", "path": "/v1/refunds"}},
	{"replica_lag", map[string]any{"rules": []map[string]any{
		{"profile": "timeout_after_apply", "count": 1, "method": "POST", "path": "/v1/refunds"},
		{"profile": "replica_lag", "delay": "500ms"},
	}}},
}

// TestKillMatrix crosses every kill point with every rail fault: the
// chaos build of countersign SIGKILLs itself at the point, a normal build
// restarts on the same ledger, the agent retries the identical refund, and
// the ledger must end APPLIED exactly as the rail's journal says, with one
// rail effect. CHAOS_TRIALS (default 1) repeats each cell.
func TestKillMatrix(t *testing.T) {
	trials := 1
	if v, err := strconv.Atoi(os.Getenv("CHAOS_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	var mu sync.Mutex
	type cell struct{ trials, applied, violations int }
	cells := map[[2]string]*cell{}
	planned, finished := len(chaos.Points())*len(chaosProfiles)*trials, 0
	t.Run("matrix", func(t *testing.T) {
		for _, point := range chaos.Points() {
			for _, prof := range chaosProfiles {
				key := [2]string{point, prof.name}
				cells[key] = &cell{}
				for trial := range trials {
					t.Run(fmt.Sprintf("%s/%s/%d", point, prof.name, trial), func(t *testing.T) {
						t.Parallel()
						start := time.Now()
						t.Cleanup(func() {
							mu.Lock()
							defer mu.Unlock()
							c := cells[key]
							c.trials++
							verdict := "APPLIED, one rail effect"
							if t.Failed() {
								c.violations++
								verdict = "VIOLATION"
							} else {
								c.applied++
							}
							finished++
							// Straight to stdout: go test holds a parallel
							// subtest's result line until its parent ends,
							// and make chaos shows one line per trial as it
							// finishes.
							fmt.Printf("chaos: trial %d/%d %s × %s #%d: %s (%.1fs)\n", finished, planned, point, prof.name, trial+1, verdict, time.Since(start).Seconds())
						})
						killTrial(t, point, prof.rule)
					})
				}
			}
		}
	})
	// make chaos writes the results section (CHAOS_RESULTS names the file).
	path := os.Getenv("CHAOS_RESULTS")
	if path == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Kill matrix\n\nMachine-written by `make chaos TRIALS=%d` on %s. Each trial: the chaos build SIGKILLs itself at the kill point while the rail injects the fault; a normal build restarts on the same ledger; the agent retries; the ledger must end APPLIED with the rail journal's single effect.\n\n",
		trials, time.Now().UTC().Format("2006-01-02"))
	b.WriteString("| kill point | rail fault | trials | ended APPLIED, one rail effect | violations |\n|---|---|---|---|---|\n")
	var total cell
	for _, point := range chaos.Points() {
		for _, prof := range chaosProfiles {
			c := cells[[2]string{point, prof.name}]
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d |\n", point, prof.name, c.trials, c.applied, c.violations)
			total.trials, total.applied, total.violations = total.trials+c.trials, total.applied+c.applied, total.violations+c.violations
		}
	}
	fmt.Fprintf(&b, "| **total** | | %d | %d | %d |\n", total.trials, total.applied, total.violations)
	if err := results.WriteSection(path, "kill-matrix", b.String()); err != nil {
		t.Fatal(err)
	}
}

func killTrial(t *testing.T, point string, rule map[string]any) {
	e := newRailEnv(t, envOptions{chaosKill: point, leaseTTL: 2 * time.Second, reconcileDelay: 700 * time.Millisecond, routeTimeout: 2 * time.Second})
	e.payment("stripe", "pi_kill", 100000, "usd")
	// An earlier refund (so a replayed answer has something to replay),
	// made before the kill point is armed: it is a different amount.
	e.mockPost("/_mock/payments", map[string]any{"rail": "stripe", "id": "pi_warm", "amount": 1000, "currency": "usd"})
	if rule != nil {
		e.fault(rule)
	}
	form := url.Values{"payment_intent": {"pi_kill"}, "amount": {"2500"}}
	first := e.stripeRefund(nil, form)
	// The armed process dies at its point (every point is on this path).
	done := make(chan error, 1)
	go func() { done <- e.countersig.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("countersign did not die at %s (agent saw %d)", point, first.Status)
	}
	e.countersig = startProc(t, "countersign", e.csEnv, "serve")
	waitStatus(t, "http://"+e.httpAddr+"/readyz", 200, 30*time.Second)

	// The agent retries the identical refund until the ledger says APPLIED.
	deadline := time.Now().Add(45 * time.Second)
	for {
		its := e.intentsOn("pi_kill")
		if len(its) == 1 && its[0].State == intent.Applied {
			break
		}
		if time.Now().After(deadline) {
			e.settle("pi_kill", time.Millisecond) // fails with the states
		}
		e.stripeRefund(nil, form)
		time.Sleep(300 * time.Millisecond)
	}
	its := e.intentsOn("pi_kill")
	j := e.journal()
	if got := j.effectsOn("pi_kill"); got != 1 {
		t.Fatalf("%d rail effects, want 1 (agent first saw %d)", got, first.Status)
	}
	for _, f := range j.Effects {
		if f.Subject == "pi_kill" && f.EntityID != its[0].RailEntityID {
			t.Fatalf("ledger says %s, the rail applied %s", its[0].RailEntityID, f.EntityID)
		}
	}
}

// TestNormalBuildCannotArmAKillPoint: the same variable on a normal build
// changes nothing.
func TestNormalBuildCannotArmAKillPoint(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_unarmed", 10000, "usd")
	env := append(append([]string{}, e.csEnv...), "COUNTERSIGN_CHAOS_KILL="+chaos.AfterWALBeforeCall)
	_ = e.countersig.cmd.Process.Kill()
	_ = e.countersig.cmd.Wait()
	e.countersig = startProc(t, "countersign", env, "serve")
	waitStatus(t, "http://"+e.httpAddr+"/readyz", 200, 30*time.Second)
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_unarmed"}, "amount": {"100"}}); r.Status != 200 {
		t.Fatalf("refund on a normal build with a kill point named: %d %s", r.Status, r.Body)
	}
	if e.countersig.cmd.ProcessState != nil {
		t.Fatal("the normal build died")
	}
}
