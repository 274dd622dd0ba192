package engine

import (
	"sync"
	"time"

	"github.com/countersign/countersign/internal/ledger"
)

// remembered keeps, per presented credential and rail account, the
// principal and mandate a decision read, so that a refusal by the early
// limits (a refund above the mandate's maximum: the agent's cheapest
// attack, and a loop's commonest mistake) is one batch, its write, instead
// of a read and then a write. It is memory, not trust: the write checks the
// facts in its own transaction (the credential and agent live, the mandate
// still the agent's newest in force, the request alias unseen) and, if any
// moved, writes nothing and the decision is made again on facts read now.
// So a revocation still stops the very next decision, and what remembered
// facts can cost is one wasted batch, never a wrong answer. A decision that
// goes past the early limits reads (whether the request was seen before
// must be known before the rail is read).
//
// Only facts that name a live principal and a mandate are kept (a refusal
// for their absence is read each time), and only for requests that read
// nothing else (no payee history).
type remembered struct {
	mu      sync.Mutex
	entries map[rememberedKey]rememberedFacts
}

type rememberedKey struct {
	credential [32]byte
	account    string
}

type rememberedFacts struct {
	principal ledger.Principal
	mandate   ledger.MandateRecord
	until     time.Time
}

const (
	// rememberFor bounds how long facts are used unread; the checks make
	// any value safe, this one bounds the memory of an agent gone quiet.
	rememberFor = 10 * time.Second
	// rememberMax bounds the entries: only credentials that authenticated
	// are kept, so this is the number of agents active at once.
	rememberMax = 8192
)

func (r *remembered) get(k rememberedKey, now time.Time) (ledger.DecisionFacts, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.entries[k]
	if !ok || !now.Before(f.until) {
		return ledger.DecisionFacts{}, false
	}
	return ledger.DecisionFacts{Principal: f.principal, Mandate: f.mandate, MandateFound: true, Remembered: true}, true
}

func (r *remembered) put(k rememberedKey, f ledger.DecisionFacts, now time.Time) {
	if f.PrincipalErr != nil || !f.MandateFound {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries == nil || len(r.entries) >= rememberMax {
		r.entries = make(map[rememberedKey]rememberedFacts)
	}
	r.entries[k] = rememberedFacts{principal: f.Principal, mandate: f.Mandate, until: now.Add(rememberFor)}
}

func (r *remembered) forget(k rememberedKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.entries, k)
}
