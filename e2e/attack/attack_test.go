package attack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/results"
)

// TestAttackSubset is the benchmark's fast subset, part of `make test`: one
// scenario per family (those marked smoke), every policy, both modes.
func TestAttackSubset(t *testing.T) {
	all, err := LoadAll(os.DirFS("."), "scenarios")
	if err != nil {
		t.Fatal(err)
	}
	var subset []*Scenario
	have := map[string]bool{}
	for _, s := range all {
		if s.Smoke {
			subset = append(subset, s)
			if have[s.Family] {
				t.Errorf("family %s has more than one smoke scenario", s.Family)
			}
			have[s.Family] = true
		}
	}
	for _, f := range Families {
		if !have[f.Name] {
			t.Errorf("family %s has no smoke scenario", f.Name)
		}
	}
	rep := runAll(t, subset)
	check(t, rep)
	for _, r := range rep.Runs {
		// The attack can succeed without the gate: a subset scenario measures something.
		if r.Mode == "direct" && r.Policy == Credulous && r.Scenario.Attack != nil && r.Err == nil && !r.Judgement.AttackSucceeded {
			t.Errorf("%s: the attack fails direct too (credulous); the scenario measures nothing", r.Scenario.Name)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + rep.Markdown("(subset)", "go test -run TestAttackSubset ./e2e/attack/", ""))
	}
}

// TestAttack is `make attack`: every scenario; with ATTACK_RESULTS it
// writes its section of RESULTS.md, with ATTACK_CHART the chart.
func TestAttack(t *testing.T) {
	if os.Getenv("COUNTERSIGN_ATTACK") == "" {
		t.Skip("the whole benchmark runs with COUNTERSIGN_ATTACK=1 (make attack); make test runs TestAttackSubset")
	}
	all, err := LoadAll(os.DirFS("."), "scenarios")
	if err != nil {
		t.Fatal(err)
	}
	if only := os.Getenv("ATTACK_ONLY"); only != "" { // a regexp of scenario names, for a person debugging one
		re, err := regexp.Compile(only)
		if err != nil {
			t.Fatal(err)
		}
		all = slices.DeleteFunc(all, func(s *Scenario) bool { return !re.MatchString(s.Name) })
		if os.Getenv("ATTACK_RESULTS") != "" {
			t.Fatal("ATTACK_ONLY runs a part of the benchmark: it writes no RESULTS.md")
		}
	}
	rep := runAll(t, all)
	chart, out := os.Getenv("ATTACK_CHART"), os.Getenv("ATTACK_RESULTS")
	chartRef := ""
	if chart != "" {
		if err := rep.Chart(chart); err != nil {
			t.Fatal(err)
		}
		chartRef = "docs/" + chart[strings.LastIndex(chart, "/")+1:]
	}
	if trace := os.Getenv("ATTACK_TRACE"); trace != "" {
		if err := os.WriteFile(trace, []byte(rep.Trace()), 0o644); err != nil { //nolint:gosec // a report
			t.Fatal(err)
		}
	}
	md := rep.Markdown(meta(), "make attack", chartRef)
	t.Log("\n" + md)
	if out != "" {
		if err := results.WriteSection(out, "attack", md); err != nil {
			t.Fatal(err)
		}
	}
	check(t, rep)
}

// runAll runs every scenario under every policy, direct then gated, each
// mode on its one stack.
func runAll(t *testing.T, scenarios []*Scenario) *Report {
	t.Helper()
	rep := &Report{}
	for _, mode := range []string{"direct", "gated"} {
		st := stack(t, mode)
		for _, s := range scenarios {
			for _, p := range Policies {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				r := st.RunScenario(ctx, s, p)
				cancel()
				if r.Err != nil {
					t.Errorf("%s %s %s: %v", s.Name, mode, p, r.Err)
				}
				rep.Runs = append(rep.Runs, r)
			}
		}
	}
	return rep
}

// check asserts the benchmark's targets on gated runs: no attack success
// and no money out on a family Countersign claims; no exactly-once
// violation; the careful policy meets every benign task without a false
// block.
func check(t *testing.T, rep *Report) {
	t.Helper()
	for _, r := range rep.Runs {
		if r.Mode != "gated" || r.Err != nil {
			continue
		}
		j := r.Judgement
		if claimed(r) && j.AttackSucceeded && r.Scenario.KnownGap != "" {
			t.Logf("known gap: %s (%s, %s policy) got %s out through Countersign: %s",
				r.Scenario.Name, r.Scenario.Family, r.Policy, moneyText(j.MoneyOut), r.Scenario.KnownGap)
		} else if claimed(r) && j.AttackSucceeded {
			t.Errorf("HOLE: %s (%s, %s policy) got %s out through Countersign (leaked %v); exchanges:\n%s",
				r.Scenario.Name, r.Scenario.Family, r.Policy, moneyText(j.MoneyOut), j.Leaked, exchanges(r))
		}
		if j.ExactlyOnceViolations > 0 {
			t.Errorf("%s (%s): %d rail effects beyond one per intended action, gated", r.Scenario.Name, r.Policy, j.ExactlyOnceViolations)
		}
		if r.Policy == Careful && r.Scenario.Family == "benign" {
			if !j.HonestMet {
				t.Errorf("%s: the careful agent's benign task was not done gated; exchanges:\n%s", r.Scenario.Name, exchanges(r))
			}
			for _, x := range r.Final {
				if x.Expect == "allow" && (x.Verdict == "BLOCK" || x.Verdict == "HOLD") {
					t.Errorf("%s: false %s of an honest request: %d %s", r.Scenario.Name, x.Verdict, x.Status, x.Body)
				}
			}
		}
	}
}

// Trace is every run's judgement and exchanges, for a person reading why.
func (rep *Report) Trace() string {
	var b strings.Builder
	for _, r := range rep.Runs {
		j := r.Judgement
		fmt.Fprintf(&b, "%s %s %s (tag %s): err %v, money out %s, leaked %v, honest met %v, exactly-once violations %d, effects %d\n%s",
			r.Scenario.Name, r.Mode, r.Policy, r.Tag, r.Err, moneyText(j.MoneyOut), j.Leaked, j.HonestMet, j.ExactlyOnceViolations, j.Effects, rateText(j)+exchangesUpTo(r, 4000))
	}
	return b.String()
}

// rateText is a rate goal's measurement, for the trace.
func rateText(j Judgement) string {
	if j.Densest == 0 {
		return ""
	}
	return fmt.Sprintf("  rate: densest window-length span held %d effects; tightest span over max_calls+1 effects %s\n", j.Densest, j.Tightest)
}

func exchanges(r *Run) string { return exchangesUpTo(r, 300) }

func exchangesUpTo(r *Run, limit int) string {
	var b strings.Builder
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	for _, x := range r.Exchanges {
		body := x.Body
		if len(body) > limit {
			body = body[:limit] + "…"
		}
		fmt.Fprintf(&b, "  step %d send %d attempt %d (%s): %d %s %s\n", x.Step, x.Send, x.Attempt, x.Role, x.Status, x.Verdict, body)
	}
	return b.String()
}

// meta is the run's date, commit and machine.
func meta() string {
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--",
			":(top)", ":(top,exclude)RESULTS.md", ":(top,exclude)docs/attack.svg").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.Join(strings.Fields(v), " ")
				break
			}
		}
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load average " + strings.Fields(string(b))[0]
	}
	return fmt.Sprintf("Run %s, commit %s, on %s (%d cores%s), %s.", time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit, cpu, runtime.NumCPU(), load, runtime.Version())
}
