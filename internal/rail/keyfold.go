package rail

import (
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/sik"
)

// KeySet collects the keys of one request's key-value member (Stripe
// metadata, Razorpay notes, an MCP tool's metadata argument) and refuses a
// key equal under Unicode simple case folding (strings.EqualFold) to one
// already added, or to the stamp key without being it. The rail keeps such
// keys apart and echoes them in the created entity, where the strict
// answer reader (CheckAnswerJSON) counts them as one member twice and
// refuses the 200: the agent could make every one of its applied answers
// ambiguous, each costing a reconciliation listing on the owner's rate
// limit. The stamp key itself, sent exactly, is the parser's to handle.
// The zero value is ready to use.
type KeySet struct {
	seen map[string]string // folded key → key as sent
}

// Add records key, or says why it cannot be: the error names the key and
// the one it collides with, for the parser to refuse the request with.
func (s *KeySet) Add(key string) error {
	if key != sik.StampKey && strings.EqualFold(key, sik.StampKey) {
		return fmt.Errorf("key %q is %s in another case; %s is Countersign's, and the rail would echo both", key, sik.StampKey, sik.StampKey)
	}
	folded := foldName(key)
	if prev, dup := s.seen[folded]; dup {
		if prev == key {
			return fmt.Errorf("key %q is sent twice", key)
		}
		return fmt.Errorf("keys %q and %q differ only in case; the rail keeps both and echoes both, which readers that ignore case read as one", prev, key)
	}
	if s.seen == nil {
		s.seen = map[string]string{}
	}
	s.seen[folded] = key
	return nil
}
