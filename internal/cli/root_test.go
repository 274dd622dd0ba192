package cli

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261201141452-1124b3137ca5"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1124b3137ca52a4b5174d5cf028b38b09294d555"}, {Key: "vcs.modified", Value: "false"}}}
	dirty := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261201141452-1124b3137ca5+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "1124b31"}, {Key: "vcs.modified", Value: "true"}}}
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	cases := []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		want   []string
	}{
		{"module version and revision", "dev", stamped, []string{"countersign v0.0.0-20261201141452-1124b3137ca5 ", "revision 1124b3137ca52a4b5174d5cf028b38b09294d555", "go1.26.0"}},
		{"link-time version wins", "v1.2.3", stamped, []string{"countersign v1.2.3 ", "revision 1124b3137ca5"}},
		{"uncommitted changes are said", "dev", dirty, []string{"revision 1124b31 with uncommitted changes"}},
		{"no VCS stamp is said, not guessed", "dev", unstamped, []string{"countersign dev ", "built without VCS information"}},
		{"no build info", "dev", nil, []string{"countersign dev ", "built without VCS information"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := versionLine(tc.linked, tc.bi)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("versionLine = %q, want it to contain %q", got, w)
				}
			}
			if strings.Contains(got, "unknown") && tc.bi != nil {
				t.Errorf("versionLine = %q says unknown", got)
			}
		})
	}
}

func TestMistypedFlagGetsASuggestion(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"one letter off", []string{"serve", "--grpc-adr", "x"}, "did you mean --grpc-addr?"},
		{"with a value", []string{"serve", "--log-lvel=debug"}, "did you mean --log-level?"},
		{"a part of the name", []string{"serve", "--rails=x"}, "--rails-file"},
		{"nothing near", []string{"serve", "--zzzzzzzzzz"}, "run 'countersign serve --help' for its flags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			root := NewRoot(&out, &errOut)
			root.SetArgs(tc.args)
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
