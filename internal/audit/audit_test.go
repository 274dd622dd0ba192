package audit

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func testKey(t *testing.T) (note.Signer, note.Verifier) {
	t.Helper()
	skey, _, err := GenerateKey("audit.test")
	if err != nil {
		t.Fatal(err)
	}
	s, v, err := ParseSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func signed(t *testing.T, s note.Signer, acct string, size int64) string {
	t.Helper()
	n, err := SignCheckpoint(Checkpoint{Origin: Origin(acct), Size: size, Root: tlog.Hash{byte(size)}}, s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRailAccountOf(t *testing.T) {
	for _, acct := range []string{"acct_1", "acct 2+x/y", "é", "a%41"} {
		got, ok := RailAccountOf(Origin(acct))
		if !ok || got != acct {
			t.Errorf("RailAccountOf(Origin(%q)) = %q, %v", acct, got, ok)
		}
	}
	for _, origin := range []string{"", "countersign/audit/", "other/acct_1", "countersign/audit/a b", "countersign/audit/%4", "countersign/audit/%41"} {
		if got, ok := RailAccountOf(origin); ok {
			t.Errorf("RailAccountOf(%q) = %q, want none (not what Origin writes)", origin, got)
		}
	}
}

func TestOpenCheckpoints(t *testing.T) {
	s, v := testKey(t)
	other, otherV := testKey(t)
	a, b, c := signed(t, s, "acct_1", 3), signed(t, s, "acct_1", 7), signed(t, s, "acct 2", 1)
	cases := []struct {
		name     string
		text     string
		onlyMine bool // trust v only, not otherV
		sizes    []int64
		err      string
	}{
		{"one", a, false, []int64{3}, ""},
		{"back to back", a + b + c, false, []int64{3, 7, 1}, ""},
		{"blank lines between and around", "\n" + a + "\n\n" + b + "\n", false, []int64{3, 7}, ""},
		{"no final newline", a + strings.TrimSuffix(b, "\n"), false, []int64{3, 7}, ""},
		{"co-signed", cosign(t, a, other), false, []int64{3}, ""},
		{"empty", "\n\n", false, nil, "no checkpoint in it"},
		{"another key's", a + signed(t, other, "acct_1", 9), true, nil, "checkpoint 2: not signed by the trusted key"},
		{"altered", strings.Replace(a, "\n3\n", "\n4\n", 1), true, nil, "checkpoint 1: signature by the trusted key does not verify"},
		{"not a rail account's log", mustSign(t, s, "example.com/log\n1\n"+strings.Repeat("A", 43)+"=\n"), false, nil, "is not the origin of a rail account's audit log"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trusted := []note.Verifier{v, otherV}
			if tc.onlyMine {
				trusted = trusted[:1]
			}
			got, err := OpenCheckpoints(tc.text, trusted...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int64
			for _, c := range got {
				sizes = append(sizes, c.Size)
			}
			if len(sizes) != len(tc.sizes) {
				t.Fatalf("sizes %v, want %v", sizes, tc.sizes)
			}
			for i := range sizes {
				if sizes[i] != tc.sizes[i] {
					t.Fatalf("sizes %v, want %v", sizes, tc.sizes)
				}
			}
		})
	}
	if _, err := OpenCheckpoints(a); err == nil {
		t.Fatal("kept checkpoints opened without a trusted key")
	}
}

func mustSign(t *testing.T, s note.Signer, text string) string {
	t.Helper()
	msg, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	return string(msg)
}

// cosign adds s's signature to the signed note n.
func cosign(t *testing.T, n string, s note.Signer) string {
	t.Helper()
	_, err := note.Open([]byte(n), note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		t.Fatal(err)
	}
	msg, err := note.Sign(unverified.Note, s)
	if err != nil {
		t.Fatal(err)
	}
	return string(msg)
}
