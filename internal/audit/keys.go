package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// GenerateKey returns a new note signer key (secret) and its verifier key
// for name, Ed25519.
func GenerateKey(name string) (signerKey, verifierKey string, err error) {
	if name == "" || strings.ContainsAny(name, "+ \t\n/") {
		return "", "", fmt.Errorf("audit key name %q must be non-empty without '+', '/' or spaces", name)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", "", fmt.Errorf("audit: generate key: %w", err)
	}
	return skey, vkey, nil
}

// ParseSigner reads a note signer key and returns the signer and the
// verifier of its public half, so a server can check what it signed.
func ParseSigner(skey string) (note.Signer, note.Verifier, error) {
	skey = strings.TrimSpace(skey)
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, nil, fmt.Errorf("not a note signer key: %w", err)
	}
	// PRIVATE+KEY+<name>+<hash>+<base64(alg ‖ seed)>: the verifier key
	// is derived from the seed (note offers no accessor).
	// The base64 may hold '+' itself: the key is what follows the hash.
	rest := strings.TrimPrefix(skey, "PRIVATE+KEY+"+s.Name()+"+")
	_, b64, _ := strings.Cut(rest, "+")
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return nil, nil, errors.New("not an Ed25519 note signer key")
	}
	pub, _ := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(s.Name(), pub)
	if err != nil {
		return nil, nil, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, nil, err
	}
	return s, v, nil
}

// LoadSigner reads the signer key in file.
func LoadSigner(file string) (note.Signer, note.Verifier, error) {
	raw, err := os.ReadFile(file) //nolint:gosec // the operator names the key file
	if err != nil {
		return nil, nil, fmt.Errorf("audit signing key: %w", err)
	}
	s, v, err := ParseSigner(string(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("audit signing key %s: %w", file, err)
	}
	return s, v, nil
}

// LoadVerifier reads the verifier key in file.
func LoadVerifier(file string) (note.Verifier, error) {
	raw, err := os.ReadFile(file) //nolint:gosec // the operator names the key file
	if err != nil {
		return nil, fmt.Errorf("audit verifier key: %w", err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("audit verifier key %s: %w", file, err)
	}
	return v, nil
}

// WriteKeyPair generates a key for name and writes it into dir as
// <name>.key (the signer, 0600) and <name>.pub (the verifier, 0644). It
// never overwrites a file.
func WriteKeyPair(dir, name string) (signerFile, verifierFile, verifierKey string, err error) {
	skey, vkey, err := GenerateKey(name)
	if err != nil {
		return "", "", "", err
	}
	signerFile, verifierFile = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	if err := writeNew(signerFile, skey+"\n", 0o600); err != nil {
		return "", "", "", err
	}
	if err := writeNew(verifierFile, vkey+"\n", 0o644); err != nil {
		_ = os.Remove(signerFile)
		return "", "", "", err
	}
	return signerFile, verifierFile, vkey, nil
}

func writeNew(path, content string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode) //nolint:gosec // the operator names the directory
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// LoadVerifiers reads each verifier key file (the current key and those
// of earlier, rotated keys).
func LoadVerifiers(files []string) ([]note.Verifier, error) {
	out := make([]note.Verifier, 0, len(files))
	for _, f := range files {
		v, err := LoadVerifier(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
