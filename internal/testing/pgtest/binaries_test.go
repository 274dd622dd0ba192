package pgtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinDir makes dir/<version>/bin with executable initdb and postgres stubs.
func fakeBinDir(t *testing.T, root, version string, complete bool) string {
	t.Helper()
	dir := filepath.Join(root, version, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"initdb", "postgres"}
	if !complete {
		names = names[:1]
	}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindBinaries(t *testing.T) {
	root := t.TempDir()
	v96 := fakeBinDir(t, root, "9.6", true)
	v15 := fakeBinDir(t, root, "15", true)
	fakeBinDir(t, root, "16", false) // newest, but without a server
	other := fakeBinDir(t, t.TempDir(), "x", true)
	noPgConfig := func() (string, error) { return "", errors.New("no pg_config") }
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	glob := filepath.Join(root, "*", "bin")

	for _, tc := range []struct {
		name    string
		src     binarySources
		want    string
		wantErr []string
	}{
		{
			name: "COUNTERSIGN_PG_BIN first",
			src:  binarySources{getenv: mapEnv(map[string]string{"COUNTERSIGN_PG_BIN": other}), pgConfig: func() (string, error) { return v96, nil }, globs: []string{glob}, lookPath: noPath},
			want: other,
		},
		{
			name:    "COUNTERSIGN_PG_BIN wrong is an error, not a fallback",
			src:     binarySources{getenv: mapEnv(map[string]string{"COUNTERSIGN_PG_BIN": root}), pgConfig: func() (string, error) { return v96, nil }, globs: []string{glob}, lookPath: noPath},
			wantErr: []string{"COUNTERSIGN_PG_BIN=" + root},
		},
		{
			name: "pg_config before the glob",
			src:  binarySources{getenv: mapEnv(nil), pgConfig: func() (string, error) { return v96, nil }, globs: []string{glob}, lookPath: noPath},
			want: v96,
		},
		{
			name: "newest complete version from the glob",
			src:  binarySources{getenv: mapEnv(nil), pgConfig: noPgConfig, globs: []string{glob}, lookPath: noPath},
			want: v15,
		},
		{
			name: "PATH last",
			src:  binarySources{getenv: mapEnv(nil), pgConfig: noPgConfig, globs: nil, lookPath: func(string) (string, error) { return filepath.Join(other, "initdb"), nil }},
			want: other,
		},
		{
			name:    "nothing found explains what to do",
			src:     binarySources{getenv: mapEnv(nil), pgConfig: noPgConfig, globs: []string{filepath.Join(t.TempDir(), "*", "bin")}, lookPath: noPath},
			wantErr: []string{"apt-get install -y postgresql-15", "DATABASE_URL", "COUNTERSIGN_PG_BIN"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findBinaries(tc.src)
			if tc.wantErr != nil {
				if !errors.Is(err, ErrNoBinaries) {
					t.Fatalf("err = %v, want ErrNoBinaries", err)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error does not mention %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("findBinaries = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestBinariesOnThisMachine(t *testing.T) {
	dir, err := Binaries()
	if err != nil {
		t.Fatal(err)
	}
	if !hasServerBinaries(dir) {
		t.Fatalf("Binaries() = %s, which lacks initdb or postgres", dir)
	}
}
