package pgtest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The parent-death signal that makes an abandoned cluster die is Linux's
// (sysproc_linux.go), so this test is built on Linux only.

// TestAbandonedClusterDies runs a child test process that starts a cluster and exits
// without closing it, as a panic in a test goroutine would: the server must die with it,
// and the next cluster start must sweep its directory.
func TestAbandonedClusterDies(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), abandonHelperEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		t.Fatalf("helper printed %q, want \"<pid> <dir>\"", out)
	}
	pm, _ := strconv.Atoi(fields[0])
	dir := fields[1]
	if !waitUntil(context.Background(), 10*time.Second, 10*time.Millisecond, func() bool { return !processAlive(pm) }) {
		t.Fatalf("postmaster %d outlived its test process", pm)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("helper's directory %s: %v", dir, err)
	}
	sweepStale()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("sweep left %s (stat: %v)", dir, err)
	}
}
