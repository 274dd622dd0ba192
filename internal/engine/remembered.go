package engine

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/ledger"
)

// remembered keeps, per presented credential and rail account, the
// principal and mandate a decision read, so that the next decisions of the
// agent on the account read nothing before they decide: a refusal by the
// early limits (a refund above the mandate's maximum: the agent's cheapest
// attack, and a loop's commonest mistake) is one batch, its write, and a
// new action is its rail read and one batch, the fresh write. It is memory,
// not trust: every write made on remembered facts checks them in its own
// transaction (the credential and agent live, the mandate still the
// agent's newest in force, the request's alias and intent new) and, if any
// moved, writes nothing, the facts are forgotten and the decision is made
// again on facts read now (the locking transaction runs on them only once
// a write has found them current). So a revocation still stops the very
// next decision, and what remembered facts can cost is one wasted batch
// and rail read, never a wrong answer.
//
// Only facts that name a live principal and a mandate are kept (a refusal
// for their absence is read each time), and only for requests that read
// nothing else (no payee history). A request this engine has decided
// before (seenAliases) is decided on a read, which answers a duplicate
// from its intent without reading the rail again.
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

// seenAliases is a lossy memory of the request aliases, per agent, this
// engine has taken past the early limits, so that a request sent again (an agent's
// retry, a loop) is decided on a read of the ledger, which answers it from
// its intent without reading the rail, rather than on remembered facts. It
// is a fixed table of hashes (no allocation, bounded memory whatever the
// agent sends) and may be wrong both ways without changing an answer: a
// collision sends a new request to the read it would have made anyway, and
// a forgotten alias (overwritten, or decided by another process) sends a
// duplicate to the rail read and the fresh write, whose insert of the
// existing alias or intent refuses, and the locking transaction answers it
// from its intent.
type seenAliases struct {
	seed  maphash.Seed
	slots [seenSlots]atomic.Uint64
}

// seenSlots is the table's size: the aliases of the last few seconds of
// decisions at thousands per second (512 KiB, untouched until used).
const seenSlots = 1 << 16

func newSeenAliases() *seenAliases { return &seenAliases{seed: maphash.MakeSeed()} }

// sum is the hash of alias as agent sent it, never 0 (an empty slot). The
// agent is in it so that what one agent sent says nothing, not even by
// timing, about another's requests.
func (s *seenAliases) sum(agent, alias string) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	_, _ = h.WriteString(agent)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(alias)
	return h.Sum64() | 1
}

func (s *seenAliases) add(agent, alias string) {
	h := s.sum(agent, alias)
	s.slots[h%seenSlots].Store(h)
}

func (s *seenAliases) has(agent, alias string) bool {
	h := s.sum(agent, alias)
	return s.slots[h%seenSlots].Load() == h
}
