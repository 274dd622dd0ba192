package attack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// bins are the binaries built for this test run.
var bins Binaries

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cs-attack-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", dir+"/", "../../cmd/countersign", "../../cmd/mockrail")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "attack: build:", err)
		return 1
	}
	bins = Binaries{Countersign: filepath.Join(dir, "countersign"), Mockrail: filepath.Join(dir, "mockrail")}
	code := m.Run()
	stacksMu.Lock()
	for _, s := range stacks {
		s.Close()
	}
	stacksMu.Unlock()
	return code
}

var (
	stacksMu sync.Mutex
	stacks   = map[string]*Stack{}
)

// stack is the process-wide stack of mode, started on first use: every
// test of the binary shares it, and each run has its own payments and agents.
func stack(t *testing.T, mode string) *Stack {
	t.Helper()
	stacksMu.Lock()
	defer stacksMu.Unlock()
	if s, ok := stacks[mode]; ok {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartStack(ctx, mode, bins)
	if err != nil {
		t.Fatalf("start %s stack: %v", mode, err)
	}
	stacks[mode] = s
	return s
}
