package console

import (
	"container/heap"
	"crypto/sha256"
	"sync"
	"time"
)

// maxUsedStates bounds the OIDC sign-in states remembered as used: about a
// megabyte at most.
const maxUsedStates = 10000

// usedStates makes an OIDC sign-in single-use in this process: the first
// callback that carries a sign-in's sealed cookie and state claims it, and
// every later one (a replay of the same cookie and state) is refused
// before anything is sent to the issuer. The sealed cookie cannot do it
// alone: it is cleared in the browser, but a copy of it stays valid until
// it expires.
//
// It is kept in memory, not in the ledger, because what it protects is
// bounded anyway: it only has to stop one sign-in being redeemed over and
// over, and the token exchanges per source are bounded separately
// (Options.OIDCExchanges). With several replicas a copied cookie can be
// replayed once on each; a restart forgets the states claimed before it.
// The set is bounded (maxUsedStates): it forgets expired states first and,
// when full of live ones, the one that expires first. Filling it takes a
// fresh sign-in per state, and a forgotten state that is replayed still
// takes one exchange from its source's bucket, so forgetting can double
// what the source's bucket allows at most, never make it unbounded.
type usedStates struct {
	max int

	mu     sync.Mutex
	until  map[[32]byte]time.Time
	expiry stateHeap // the same states, soonest expiry first
}

func newUsedStates(maxStates int) *usedStates {
	return &usedStates{max: maxStates, until: map[[32]byte]time.Time{}}
}

// claim reports whether state, valid until expires, is claimed now for the
// first time.
func (u *usedStates) claim(state string, expires, now time.Time) bool {
	h := sha256.Sum256([]byte(state))
	u.mu.Lock()
	defer u.mu.Unlock()
	for len(u.expiry) > 0 && !now.Before(u.expiry[0].expires) {
		delete(u.until, heap.Pop(&u.expiry).(usedState).hash)
	}
	if _, ok := u.until[h]; ok {
		return false
	}
	if len(u.until) >= u.max {
		delete(u.until, heap.Pop(&u.expiry).(usedState).hash)
	}
	u.until[h] = expires
	heap.Push(&u.expiry, usedState{hash: h, expires: expires})
	return true
}

type usedState struct {
	hash    [32]byte
	expires time.Time
}

type stateHeap []usedState

func (h stateHeap) Len() int           { return len(h) }
func (h stateHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h stateHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *stateHeap) Push(x any)        { *h = append(*h, x.(usedState)) }
func (h *stateHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
