package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries reports that no PostgreSQL server binaries (initdb, postgres) were found.
// Errors returned by Binaries, StartCluster and Main wrap it with install instructions.
var ErrNoBinaries = errors.New("pgtest: no PostgreSQL server binaries found")

// Binaries finds the directory holding the PostgreSQL server binaries: $COUNTERSIGN_PG_BIN,
// then `pg_config --bindir`, then the newest /usr/lib/postgresql/*/bin, then $PATH.
func Binaries() (dir string, err error) {
	return findBinaries(binarySources{
		getenv:   os.Getenv,
		pgConfig: pgConfigBindir,
		globs:    []string{"/usr/lib/postgresql/*/bin"},
		lookPath: exec.LookPath,
	})
}

type binarySources struct {
	getenv   func(string) string
	pgConfig func() (string, error)
	globs    []string
	lookPath func(string) (string, error)
}

func findBinaries(s binarySources) (string, error) {
	if dir := s.getenv("COUNTERSIGN_PG_BIN"); dir != "" {
		// An explicit setting that is wrong must be loud, not silently replaced.
		if !hasServerBinaries(dir) {
			return "", fmt.Errorf("%w in COUNTERSIGN_PG_BIN=%s (it must hold initdb and postgres)", ErrNoBinaries, dir)
		}
		return dir, nil
	}
	if dir, err := s.pgConfig(); err == nil && hasServerBinaries(dir) {
		return dir, nil
	}
	for _, pattern := range s.globs {
		dirs, _ := filepath.Glob(pattern)
		sort.Slice(dirs, func(i, j int) bool { return versionLess(dirs[j], dirs[i]) }) // newest first
		for _, dir := range dirs {
			if hasServerBinaries(dir) {
				return dir, nil
			}
		}
	}
	if p, err := s.lookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real // e.g. /usr/local/bin/initdb -> /usr/lib/postgresql/15/bin/initdb
		}
		if dir := filepath.Dir(p); hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (looked at $COUNTERSIGN_PG_BIN, `pg_config --bindir`, %s and $PATH).\n"+
		"Install them (Debian/Ubuntu: apt-get install -y postgresql-15; macOS: brew install postgresql@15),\n"+
		"or set COUNTERSIGN_PG_BIN to the directory holding initdb and postgres,\n"+
		"or set DATABASE_URL (or COUNTERSIGN_TEST_DATABASE_URL) to a PostgreSQL server on which the tests may create databases",
		ErrNoBinaries, strings.Join(s.globs, ", "))
}

func pgConfigBindir() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_config", "--bindir").Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionLess orders /usr/lib/postgresql/<version>/bin paths by their numeric version.
func versionLess(a, b string) bool {
	va, vb := versionParts(filepath.Base(filepath.Dir(a))), versionParts(filepath.Base(filepath.Dir(b)))
	for i := 0; i < len(va) && i < len(vb); i++ {
		if va[i] != vb[i] {
			return va[i] < vb[i]
		}
	}
	if len(va) != len(vb) {
		return len(va) < len(vb)
	}
	return a < b
}

func versionParts(s string) []int {
	var parts []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		parts = append(parts, n)
	}
	return parts
}
