package quota

import (
	"container/list"
	"sync"
)

// DefaultKnownPerOwner bounds the credentials remembered for one owner
// (Failures.AdmitFor): its tokens, its console sessions (the console keeps
// at most a few live per owner) and its recent OIDC JWTs, with room to spare.
const DefaultKnownPerOwner = 32

// knownSet is a bounded set of keys, each in the partition of the owner
// that admitted it ("" for keys admitted without one). A partition holds at
// most perOwner keys ("" at most max) and forgets its own least recently
// used key first; only when the whole set is full is a key of another
// partition forgotten: the oldest of the least recently active one. A nil
// *knownSet is empty and stays empty.
type knownSet struct {
	max, perOwner int

	mu      sync.Mutex
	n       int
	parts   *list.List // of *partition, most recently active at the front
	byOwner map[string]*list.Element
	byKey   map[string]*list.Element // each in its partition's keys
}

type partition struct {
	owner string
	keys  *list.List // of *knownKey, most recently used at the front
}

type knownKey struct {
	key  string
	part *list.Element // of knownSet.parts
}

func newKnownSet(maxKeys, perOwner int) *knownSet {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if perOwner <= 0 {
		perOwner = DefaultKnownPerOwner
	}
	return &knownSet{max: maxKeys, perOwner: min(perOwner, maxKeys), parts: list.New(),
		byOwner: map[string]*list.Element{}, byKey: map[string]*list.Element{}}
}

// add remembers key in owner's partition (moving it there if another
// partition held it), forgetting first the partition's own oldest key when
// it is full.
func (s *knownSet) add(owner, key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[key]; ok {
		k := el.Value.(*knownKey)
		if k.part.Value.(*partition).owner == owner {
			s.touch(el)
			return
		}
		s.drop(el)
	}
	limit := s.perOwner
	if owner == "" {
		limit = s.max
	}
	pel, ok := s.byOwner[owner]
	switch {
	case ok && pel.Value.(*partition).keys.Len() >= limit:
		s.drop(pel.Value.(*partition).keys.Back())
	case s.n >= s.max:
		s.drop(s.parts.Back().Value.(*partition).keys.Back())
	}
	// drop removes a partition it empties: owner's may be gone.
	if pel, ok = s.byOwner[owner]; !ok {
		pel = s.parts.PushFront(&partition{owner: owner, keys: list.New()})
		s.byOwner[owner] = pel
	}
	s.byKey[key] = pel.Value.(*partition).keys.PushFront(&knownKey{key: key, part: pel})
	s.n++
	s.parts.MoveToFront(pel)
}

func (s *knownSet) has(key string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key]
	if ok {
		s.touch(el)
	}
	return ok
}

func (s *knownSet) remove(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[key]; ok {
		s.drop(el)
	}
}

// len is the number of keys remembered in all, and in owner's partition.
func (s *knownSet) len(owner string) (all, owned int) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pel, ok := s.byOwner[owner]; ok {
		owned = pel.Value.(*partition).keys.Len()
	}
	return s.n, owned
}

// touch marks a key, and its partition, most recently used.
func (s *knownSet) touch(el *list.Element) {
	k := el.Value.(*knownKey)
	k.part.Value.(*partition).keys.MoveToFront(el)
	s.parts.MoveToFront(k.part)
}

// drop forgets a key, and its partition if that leaves it empty.
func (s *knownSet) drop(el *list.Element) {
	k := el.Value.(*knownKey)
	p := k.part.Value.(*partition)
	p.keys.Remove(el)
	delete(s.byKey, k.key)
	s.n--
	if p.keys.Len() == 0 {
		s.parts.Remove(k.part)
		delete(s.byOwner, p.owner)
	}
}
