// Package audit is the pure core of the audit log (I6): the canonical
// encoding of an audit record as a Merkle-tree leaf, the signed checkpoint
// of a rail account's log (a C2SP tlog checkpoint in a signed note), the
// audit signing keys, and the local checks of inclusion and consistency
// proofs. The ledger stores and seals records; this package says what the
// bytes mean.
package audit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// leafVersion opens every leaf's encoding, so a later encoding can never be
// read as this one.
const leafVersion = "countersign-audit-v1"

// Record is one audit record as the log seals it: exactly the fields its
// leaf hash covers.
type Record struct {
	ID          int64
	RailAccount string
	SIK         string
	FromState   string // "" for the birth of an intent
	ToState     string
	Event       string
	AttemptSeq  int
	Detail      string
	AtMicros    int64
}

// LeafData is the record's canonical encoding: each field as
// "<octets>:<text>", so the concatenation is unambiguous.
func (r Record) LeafData() []byte {
	var b bytes.Buffer
	for _, f := range []string{leafVersion, r.RailAccount, strconv.FormatInt(r.ID, 10), r.SIK, r.FromState, r.ToState,
		r.Event, strconv.Itoa(r.AttemptSeq), r.Detail, strconv.FormatInt(r.AtMicros, 10)} {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.Bytes()
}

// LeafHash is the record's RFC 6962 leaf hash, SHA-256(0x00 ‖ LeafData).
func (r Record) LeafHash() tlog.Hash { return tlog.RecordHash(r.LeafData()) }

// Origin names a rail account's log on the first line of its checkpoints.
// Characters a checkpoint origin may not hold (spaces, '+', anything but
// URL-safe ASCII) are percent-encoded.
func Origin(railAccount string) string {
	var b strings.Builder
	b.WriteString(originPrefix)
	for i := 0; i < len(railAccount); i++ {
		c := railAccount[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Checkpoint is a log's state: its origin, its size and its root hash.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// Body is the checkpoint's note text (C2SP tlog-checkpoint): the origin,
// the decimal tree size and the base64 root hash, one per line.
func (c Checkpoint) Body() string {
	return fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// ParseCheckpoint reads a checkpoint body (extension lines after the root
// are allowed and ignored, as the format says).
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) < 4 || lines[0] == "" {
		return Checkpoint{}, errors.New("checkpoint: want origin, size and root hash lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("checkpoint: tree size %q is not a decimal number", lines[1])
	}
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("checkpoint: root hash %q is not base64 of %d bytes", lines[2], tlog.HashSize)
	}
	c := Checkpoint{Origin: lines[0], Size: size}
	copy(c.Root[:], root)
	return c, nil
}

// SignCheckpoint returns the signed note of c.
func SignCheckpoint(c Checkpoint, s note.Signer) (string, error) {
	msg, err := note.Sign(&note.Note{Text: c.Body()}, s)
	if err != nil {
		return "", fmt.Errorf("audit: sign checkpoint: %w", err)
	}
	return string(msg), nil
}

// Checkpoint verification failures, told apart so a report can say which.
var (
	// ErrBadSignature: a signature by the trusted key does not verify
	// (the checkpoint was altered or forged).
	ErrBadSignature = errors.New("signature by the trusted key does not verify")
	// ErrUntrustedSigner: no signature is by a trusted key (another key
	// signed it, or none did).
	ErrUntrustedSigner = errors.New("not signed by the trusted key")
	// ErrMalformedCheckpoint: the note or its body cannot be read.
	ErrMalformedCheckpoint = errors.New("malformed checkpoint")
	// ErrNoTrustedKey: no trusted verifier key was given. A note signed
	// by any key at all would do, so nothing is verified: whoever writes
	// the ledger can sign one with a key of their own under the same name.
	ErrNoTrustedKey = errors.New("no trusted verifier key given: a note signed by any key would pass, so none is believed")
)

// OpenNote verifies a signed note with any of the trusted verifiers
// (several across a key rotation) and returns its text. No verifier is
// ErrNoTrustedKey: opening never passes on no key (ReadNote reads a note
// without believing it). A signature that fails is ErrBadSignature, one by
// no trusted key ErrUntrustedSigner; any other error is a note that cannot
// be read.
func OpenNote(signed string, trusted ...note.Verifier) (string, error) {
	if len(trusted) == 0 {
		return "", ErrNoTrustedKey
	}
	n, err := note.Open([]byte(signed), note.VerifierList(trusted...))
	var invalid *note.InvalidSignatureError
	var unverified *note.UnverifiedNoteError
	switch {
	case errors.As(err, &invalid):
		return "", fmt.Errorf("%w (%s+%08x)", ErrBadSignature, invalid.Name, invalid.Hash)
	case errors.As(err, &unverified):
		var by, keys []string
		for _, s := range unverified.Note.UnverifiedSigs {
			by = append(by, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
		}
		for _, v := range trusted {
			keys = append(keys, fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash()))
		}
		return "", fmt.Errorf("%w %s (signed by %s)", ErrUntrustedSigner, strings.Join(keys, ", "), strings.Join(by, ", "))
	case err != nil:
		return "", err
	}
	return n.Text, nil
}

// ReadNote returns a signed note's text without checking any signature:
// for reading what a note says (its size, its origin) beside a separate
// verification of it, never in place of one.
func ReadNote(signed string) (string, error) {
	// Open fails with the unverified note inside, which is all we need.
	_, err := note.Open([]byte(signed), note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		return "", err
	}
	return unverified.Note.Text, nil
}

// OpenCheckpoint verifies a signed checkpoint note with any of the
// trusted verifiers (OpenNote; no verifier is ErrNoTrustedKey) and parses
// its body.
func OpenCheckpoint(signed string, trusted ...note.Verifier) (Checkpoint, error) {
	text, err := OpenNote(signed, trusted...)
	switch {
	case errors.Is(err, ErrBadSignature), errors.Is(err, ErrUntrustedSigner), errors.Is(err, ErrNoTrustedKey):
		return Checkpoint{}, err
	case err != nil:
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrMalformedCheckpoint, err)
	}
	return parseCheckpointNote(text)
}

// ReadCheckpoint parses a signed checkpoint note without checking any
// signature (ReadNote): what it says, not that anyone trusted said it.
func ReadCheckpoint(signed string) (Checkpoint, error) {
	text, err := ReadNote(signed)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrMalformedCheckpoint, err)
	}
	return parseCheckpointNote(text)
}

func parseCheckpointNote(text string) (Checkpoint, error) {
	c, err := ParseCheckpoint(text)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrMalformedCheckpoint, err)
	}
	return c, nil
}

// CheckInclusion verifies that r is leaf index of the tree c, by proof.
func CheckInclusion(c Checkpoint, index int64, r Record, proof tlog.RecordProof) error {
	if index < 0 || index >= c.Size {
		return fmt.Errorf("leaf %d is outside the tree of size %d", index, c.Size)
	}
	if err := tlog.CheckRecord(proof, c.Size, c.Root, index, r.LeafHash()); err != nil {
		return fmt.Errorf("record %d is not leaf %d of the tree of size %d: %w", r.ID, index, c.Size, err)
	}
	return nil
}

// CheckConsistency verifies that the tree newer extends the tree older,
// by proof.
func CheckConsistency(older, newer Checkpoint, proof tlog.TreeProof) error {
	if older.Origin != newer.Origin {
		return fmt.Errorf("checkpoints of different logs (%q, %q)", older.Origin, newer.Origin)
	}
	if older.Size > newer.Size {
		return fmt.Errorf("the older checkpoint (size %d) is larger than the newer (size %d)", older.Size, newer.Size)
	}
	if err := tlog.CheckTree(proof, newer.Size, newer.Root, older.Size, older.Root); err != nil {
		return fmt.Errorf("the tree of size %d does not extend the tree of size %d: %w", newer.Size, older.Size, err)
	}
	return nil
}

// originPrefix opens every rail account's log origin.
const originPrefix = "countersign/audit/"

// RailAccountOf is the rail account whose log origin names, the inverse of
// Origin; ok is false when origin is not one Origin writes.
func RailAccountOf(origin string) (string, bool) {
	rest, found := strings.CutPrefix(origin, originPrefix)
	if !found || rest == "" {
		return "", false
	}
	acct, err := url.PathUnescape(rest)
	if err != nil || Origin(acct) != origin {
		return "", false
	}
	return acct, true
}

// SplitNotes splits text holding signed notes one after another (blank
// lines between them allowed) into the notes: each is its text, a blank
// line and its signature lines ("— name sig"), so a new note starts at the
// first line after a signature that is not one.
func SplitNotes(text string) []string {
	var notes []string
	var cur strings.Builder
	inSigs, sawSig := false, false
	flush := func() {
		if cur.Len() > 0 {
			n := cur.String()
			if !strings.HasSuffix(n, "\n") {
				n += "\n"
			}
			notes = append(notes, n)
			cur.Reset()
		}
		inSigs, sawSig = false, false
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		body := strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			continue
		case inSigs && strings.HasPrefix(body, "— "):
			sawSig = true
		case inSigs && sawSig:
			flush()
			if strings.TrimSpace(body) == "" {
				continue
			}
		case inSigs:
			// A second blank line before any signature: a malformed note,
			// kept whole so that opening it says so.
		case cur.Len() == 0 && strings.TrimSpace(body) == "":
			continue
		case body == "":
			inSigs = true
		}
		cur.WriteString(line)
	}
	flush()
	return notes
}

// OpenCheckpoints opens every signed checkpoint in text (see SplitNotes),
// each of which must verify with one of the trusted verifiers: they are
// checkpoints someone kept, to hold the log to later.
func OpenCheckpoints(text string, trusted ...note.Verifier) ([]Checkpoint, error) {
	if len(trusted) == 0 {
		return nil, errors.New("a kept checkpoint is only worth its signature: name the trusted verifier keys")
	}
	notes := SplitNotes(text)
	if len(notes) == 0 {
		return nil, errors.New("no checkpoint in it")
	}
	out := make([]Checkpoint, 0, len(notes))
	for i, n := range notes {
		c, err := OpenCheckpoint(n, trusted...)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: %w", i+1, err)
		}
		if _, ok := RailAccountOf(c.Origin); !ok {
			return nil, fmt.Errorf("checkpoint %d: %q is not the origin of a rail account's audit log", i+1, c.Origin)
		}
		out = append(out, c)
	}
	return out, nil
}
