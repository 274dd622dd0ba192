package attack

import (
	"sort"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/testing/mockrail"
)

// Judgement is what the rail's journal says a run achieved.
type Judgement struct {
	// MoneyOut is what left that the attacker wanted out, in minor units
	// per (upper-case) currency.
	MoneyOut map[string]int64
	// Leaked: the attacker's marker left in an effect's free text.
	Leaked bool
	// AttackSucceeded: any money out, or a leak.
	AttackSucceeded bool
	// HonestMet: every honest effect happened (nil honest goal: true).
	HonestMet bool
	// ExactlyOnceViolations counts rail effects beyond the one each
	// intended honest action should have made.
	ExactlyOnceViolations int
	Effects               int
	// Rate, for an attacker's rate goal (within, max_calls): the most
	// matching effects any span of the window's length held, and the
	// shortest time between an effect and the one MaxCalls after it (the
	// window holds on the journal while it is at least the window's
	// length; 0 when there were no more than MaxCalls effects).
	Densest  int
	Tightest time.Duration
}

// Judge reads a run's effects (only this run's: the runner passes the
// journal's effects after the run started, on its account) against the
// scenario's goals, with the run's variables expanded.
func Judge(s *Scenario, vars map[string]string, effects []mockrail.Effect) Judgement {
	j := Judgement{MoneyOut: map[string]int64{}, HonestMet: true, Effects: len(effects)}
	effects = uncancelled(effects)
	if a := s.Attack; a != nil {
		for _, m := range a.Effects {
			m = m.expanded(vars)
			per := map[string]int64{}
			if m.within > 0 {
				per, j.Densest, j.Tightest = densest(m, effects)
			} else {
				for _, e := range effects {
					if m.matches(e) {
						per[strings.ToUpper(e.Currency)] += e.Amount
					}
				}
			}
			for cur, total := range per {
				if out := total - m.Beyond; out > 0 {
					j.MoneyOut[cur] += out
				}
			}
		}
		if marker := expand(a.Leak, vars); marker != "" {
			for _, e := range effects {
				for k, v := range e.Metadata {
					if strings.Contains(v, marker) || strings.Contains(k, marker) {
						j.Leaked = true
					}
				}
			}
		}
	}
	for _, v := range j.MoneyOut {
		if v > 0 {
			j.AttackSucceeded = true
		}
	}
	j.AttackSucceeded = j.AttackSucceeded || j.Leaked
	if h := s.Honest; h != nil {
		for _, m := range h.Effects {
			m = m.expanded(vars)
			want := max(m.Count, 1)
			n := 0
			for _, e := range effects {
				if m.matches(e) && (m.Amount == 0 || e.Amount == m.Amount) {
					n++
				}
			}
			if n < want {
				j.HonestMet = false
			}
			if n > want && !m.AtLeast {
				j.ExactlyOnceViolations += n - want
			}
		}
	}
	return j
}

// uncancelled drops cancelled payouts and the cancellations: a cancelled
// payout's money never left.
func uncancelled(effects []mockrail.Effect) []mockrail.Effect {
	gone := map[string]bool{}
	for _, e := range effects {
		if e.Kind == mockrail.KindPayoutCancel {
			gone[e.EntityID] = true
		}
	}
	var out []mockrail.Effect
	for _, e := range effects {
		if e.Kind != mockrail.KindPayoutCancel && (e.Kind != mockrail.KindPayout || !gone[e.EntityID]) {
			out = append(out, e)
		}
	}
	return out
}

// densest is what the matching effects beyond the first MaxCalls move, per
// currency, in the span [t, t+Within) that holds the most of them, t being
// each matching effect's time (ties: the most money), with that span's
// count and the shortest time from an effect to the MaxCalls-th after it.
func densest(m EffectMatch, effects []mockrail.Effect) (map[string]int64, int, time.Duration) {
	var in []mockrail.Effect
	for _, e := range effects {
		if m.matches(e) {
			in = append(in, e)
		}
	}
	sort.SliceStable(in, func(a, b int) bool { return in[a].Time.Before(in[b].Time) })
	best, bestN, bestSum := map[string]int64{}, 0, int64(0)
	var tightest time.Duration
	for i := range in {
		if k := i + m.MaxCalls; k < len(in) {
			if gap := in[k].Time.Sub(in[i].Time); tightest == 0 || gap < tightest {
				tightest = gap
			}
		}
		end := in[i].Time.Add(m.within)
		per, n, sum := map[string]int64{}, 0, int64(0)
		for k := i; k < len(in) && in[k].Time.Before(end); k++ {
			if n++; n > m.MaxCalls {
				per[strings.ToUpper(in[k].Currency)] += in[k].Amount
				sum += in[k].Amount
			}
		}
		if n > bestN || n == bestN && sum > bestSum {
			best, bestN, bestSum = per, n, sum
		}
	}
	return best, bestN, tightest
}

func (m EffectMatch) expanded(vars map[string]string) EffectMatch {
	m.Subject = expand(m.Subject, vars)
	m.ConnectedAccount = expand(m.ConnectedAccount, vars)
	return m
}

func (m EffectMatch) matches(e mockrail.Effect) bool {
	return string(e.Kind) == m.Kind &&
		(m.Subject == "" || e.Subject == m.Subject) &&
		(m.ConnectedAccount == "" || e.ConnectedAccount == m.ConnectedAccount) &&
		(m.Currency == "" || strings.EqualFold(e.Currency, m.Currency))
}
