package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteSectionReplacesOnlyItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	read := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := WriteSection(path, "kill-matrix", "## Kill matrix\n\nrun 1"); err != nil {
		t.Fatal(err)
	}
	if err := WriteSection(path, "simulation", "## Simulation\n\nrun 1\n"); err != nil {
		t.Fatal(err)
	}
	if err := WriteSection(path, "kill-matrix", "## Kill matrix\n\nrun 2\n"); err != nil {
		t.Fatal(err)
	}
	want := "<!-- kill-matrix:begin -->\n## Kill matrix\n\nrun 2\n<!-- kill-matrix:end -->\n\n" +
		"<!-- simulation:begin -->\n## Simulation\n\nrun 1\n<!-- simulation:end -->\n"
	if got := read(); got != want {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}
	// Text around the sections is kept.
	if err := os.WriteFile(path, []byte("# Results\n\nprose\n"+want+"more prose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSection(path, "simulation", "## Simulation\n\nrun 2\n"); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.HasPrefix(got, "# Results\n\nprose\n<!-- kill-matrix:begin -->") || !strings.Contains(got, "run 2\n<!-- simulation:end -->\nmore prose\n") {
		t.Fatalf("file:\n%s", got)
	}
	// A section with one marker is refused, the file untouched.
	broken := "<!-- simulation:begin -->\nhalf\n"
	if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSection(path, "simulation", "x"); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("broken section: %v", err)
	}
	if read() != broken {
		t.Fatal("a refused write changed the file")
	}
	if err := WriteSection(path, "bad name", "x"); err == nil {
		t.Fatal("a section name with a space was accepted")
	}
}
