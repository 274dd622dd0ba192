package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestThreatModelNamesTestsThatExist: every test docs/threat-model.md names
// (`dir/TestName`, or `…/TestName` for the directory named just before)
// is a test function in that directory, so the page cannot point at a test
// that was renamed or removed.
func TestThreatModelNamesTestsThatExist(t *testing.T) {
	doc, err := os.ReadFile("../docs/threat-model.md")
	if err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile("`((?:[a-z0-9_]+/)*[a-z0-9_]+|…)/(Test[A-Za-z0-9_]+)(?:/[^`]*)?`")
	found := 0
	for _, line := range strings.Split(string(doc), "\n") {
		dir := ""
		for _, m := range ref.FindAllStringSubmatch(line, -1) {
			if m[1] != "…" {
				dir = m[1]
			}
			if dir == "" {
				t.Errorf("%q names no directory before it", m[0])
				continue
			}
			found++
			if !hasTest(t, filepath.Join("..", dir), m[2]) {
				t.Errorf("docs/threat-model.md names %s/%s, which does not exist", dir, m[2])
			}
		}
	}
	if found < 40 {
		t.Fatalf("found only %d test references in the threat model", found)
	}
}

func hasTest(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if decl.Match(b) {
			return true
		}
	}
	return false
}
