package attack

import (
	"strings"

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
}

// Judge reads a run's effects (only this run's: the runner passes the
// journal's effects after the run started, on its account) against the
// scenario's goals, with the run's variables expanded.
func Judge(s *Scenario, vars map[string]string, effects []mockrail.Effect) Judgement {
	j := Judgement{MoneyOut: map[string]int64{}, HonestMet: true, Effects: len(effects)}
	if a := s.Attack; a != nil {
		for _, m := range a.Effects {
			m = m.expanded(vars)
			per := map[string]int64{}
			for _, e := range effects {
				if m.matches(e) {
					per[strings.ToUpper(e.Currency)] += e.Amount
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

func (m EffectMatch) expanded(vars map[string]string) EffectMatch {
	m.Subject = expand(m.Subject, vars)
	return m
}

func (m EffectMatch) matches(e mockrail.Effect) bool {
	return string(e.Kind) == m.Kind &&
		(m.Subject == "" || e.Subject == m.Subject) &&
		(m.Currency == "" || strings.EqualFold(e.Currency, m.Currency))
}
