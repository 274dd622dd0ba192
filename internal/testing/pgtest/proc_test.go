package pgtest

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat, state string
		ppid              int
		ok                bool
	}{
		{"plain", "123 (postgres) S 99 123 123 0", "S", 99, true},
		{"spaces and parens in comm", "123 (a) b (c)) Z 1 2 3", "Z", 1, true},
		{"truncated", "123 (x) R", "", 0, false},
		{"garbage", "nonsense", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, ppid, ok := parseStat([]byte(tc.stat))
			if state != tc.state || ppid != tc.ppid || ok != tc.ok {
				t.Fatalf("parseStat(%q) = %q, %d, %v; want %q, %d, %v", tc.stat, state, ppid, ok, tc.state, tc.ppid, tc.ok)
			}
		})
	}
}

func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	if processAlive(0) || processAlive(-1) {
		t.Fatal("non-pids are alive")
	}
}
