package audit

import (
	"errors"
	"testing"
)

// TestOpenNeedsATrustedKey: opening a note or a checkpoint with no trusted
// key fails with ErrNoTrustedKey, whoever signed it; only ReadNote and
// ReadCheckpoint read one without believing it. Found by a review: with
// no key, OpenNote returned the text of a note signed by any key, and
// audit verification took it as checked.
func TestOpenNeedsATrustedKey(t *testing.T) {
	forger, _ := testKey(t) // any key, under the trusted key's name
	n := signed(t, forger, "acct_1", 7)
	if text, err := OpenNote(n); !errors.Is(err, ErrNoTrustedKey) || text != "" {
		t.Fatalf("OpenNote with no key = %q, %v; want ErrNoTrustedKey", text, err)
	}
	if c, err := OpenCheckpoint(n); !errors.Is(err, ErrNoTrustedKey) || errors.Is(err, ErrMalformedCheckpoint) || c != (Checkpoint{}) {
		t.Fatalf("OpenCheckpoint with no key = %+v, %v; want ErrNoTrustedKey (not malformed)", c, err)
	}
	c, err := ReadCheckpoint(n)
	if err != nil || c.Origin != Origin("acct_1") || c.Size != 7 {
		t.Fatalf("ReadCheckpoint = %+v, %v; want size 7 of acct_1", c, err)
	}
	if _, err := ReadCheckpoint("not a note"); !errors.Is(err, ErrMalformedCheckpoint) {
		t.Fatalf("ReadCheckpoint of garbage = %v, want ErrMalformedCheckpoint", err)
	}
	if _, err := ReadCheckpoint(mustSign(t, forger, "countersign/audit/acct_1\nseven\nAAAA\n")); !errors.Is(err, ErrMalformedCheckpoint) {
		t.Fatalf("ReadCheckpoint of a bad body = %v, want ErrMalformedCheckpoint", err)
	}
}
