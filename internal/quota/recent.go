package quota

import (
	"container/list"
	"sync"
)

// recentSet is a bounded set of keys that forgets the least recently used
// first. A nil *recentSet is empty and stays empty.
type recentSet struct {
	max   int
	mu    sync.Mutex
	order *list.List // of string, most recently used at the front
	byKey map[string]*list.Element
}

func newRecentSet(maxKeys int) *recentSet {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return &recentSet{max: maxKeys, order: list.New(), byKey: map[string]*list.Element{}}
}

func (s *recentSet) add(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[key]; ok {
		s.order.MoveToFront(el)
		return
	}
	if s.order.Len() >= s.max {
		oldest := s.order.Back()
		s.order.Remove(oldest)
		delete(s.byKey, oldest.Value.(string))
	}
	s.byKey[key] = s.order.PushFront(key)
}

func (s *recentSet) has(key string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key]
	if ok {
		s.order.MoveToFront(el)
	}
	return ok
}

func (s *recentSet) remove(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[key]; ok {
		s.order.Remove(el)
		delete(s.byKey, key)
	}
}
