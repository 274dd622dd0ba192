package pgtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeptDataDir(t *testing.T) {
	cred, err := serverCredential()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "pgtest-kept-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })

	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	got, moved, err := KeptDataDir(filepath.Join(open, "pg"))
	if err != nil || moved || got != filepath.Join(open, "pg") {
		t.Fatalf("KeptDataDir(reachable) = %q, %v, %v; want it kept where asked", got, moved, err)
	}

	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	got, moved, err = KeptDataDir(filepath.Join(closed, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	if cred == nil {
		// Not root: the server runs as this user, who can reach its own directory.
		if moved || got != filepath.Join(closed, "pg") {
			t.Fatalf("KeptDataDir as a user = %q, %v; want it kept where asked", got, moved)
		}
		return
	}
	if !moved || !strings.HasPrefix(got, os.TempDir()) {
		t.Fatalf("KeptDataDir(root-only) = %q, %v; want a directory under %s", got, moved, os.TempDir())
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(got)) })
	if err := checkReachable(filepath.Dir(got), cred); err != nil {
		t.Fatalf("the moved data directory is not reachable by the server's user: %v", err)
	}
	again, _, err := KeptDataDir(filepath.Join(closed, "pg"))
	if err != nil || again != got {
		t.Fatalf("a second call = %q, %v; want the same %q (later runs keep their data)", again, err, got)
	}

	// The moved location has a predictable name: a symlink planted there by
	// someone else is refused, not followed.
	planted := filepath.Join(base, "planted")
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	target, _, err := KeptDataDir(filepath.Join(planted, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	movedBase := filepath.Dir(target)
	if err := os.RemoveAll(movedBase); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, movedBase); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(movedBase) })
	if _, _, err := KeptDataDir(filepath.Join(planted, "pg")); err == nil || !strings.Contains(err.Error(), "not a private directory") {
		t.Fatalf("KeptDataDir over a planted symlink = %v; want a refusal", err)
	}
}
