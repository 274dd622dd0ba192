// Package results writes machine-made sections of RESULTS.md: each run
// (the kill matrix, the simulation) replaces its own section between
// markers and leaves the rest of the file as it was.
package results

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func markers(name string) (begin, end string) {
	return "<!-- " + name + ":begin -->\n", "<!-- " + name + ":end -->\n"
}

// WriteSection replaces section name of the file at path with content (or
// appends it when the file has no such section; a missing file is
// created). The file is replaced atomically.
func WriteSection(path, name, content string) error {
	if name == "" || strings.ContainsAny(name, " \n>") {
		return fmt.Errorf("results: bad section name %q", name)
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("results: %w", err)
	}
	begin, end := markers(name)
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	section := begin + content + end
	text := string(old)
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	switch {
	case i >= 0 && j > i:
		text = text[:i] + section + text[j+len(end):]
	case i >= 0 || j >= 0:
		return fmt.Errorf("results: %s has a broken %q section (one marker without the other)", path, name)
	default:
		if text != "" && !strings.HasSuffix(text, "\n\n") {
			text = strings.TrimRight(text, "\n") + "\n\n"
		}
		text += section
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".results-*")
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; removed if anything failed
	if _, err := tmp.WriteString(text); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("results: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // a results file in the repository
		return fmt.Errorf("results: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}
