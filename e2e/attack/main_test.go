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

func TestMain(m *testing.M) {
	code := m.Run()
	stacksMu.Lock()
	for _, s := range stacks {
		s.Close()
	}
	stacksMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	stacksMu sync.Mutex
	stacks   = map[string]*Stack{}
	bins     Binaries
	binDir   string
	binErr   error
)

// built builds cmd/countersign and cmd/mockrail once, on first use: the
// format's tests and its fuzz target need no binaries.
func built(t *testing.T) Binaries {
	t.Helper()
	if bins.Countersign == "" && binErr == nil {
		binDir, binErr = os.MkdirTemp("", "cs-attack-bin-")
		if binErr == nil {
			out, err := exec.Command("go", "build", "-o", binDir+"/", "../../cmd/countersign", "../../cmd/mockrail").CombinedOutput()
			if err != nil {
				binErr = fmt.Errorf("build: %w\n%s", err, out)
			}
		}
		bins = Binaries{Countersign: filepath.Join(binDir, "countersign"), Mockrail: filepath.Join(binDir, "mockrail")}
	}
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bins
}

// stack is the process-wide stack of mode, started on first use: every
// test of the binary shares it, and each run has its own payments and agents.
func stack(t *testing.T, mode string) *Stack {
	t.Helper()
	stacksMu.Lock()
	defer stacksMu.Unlock()
	if s, ok := stacks[mode]; ok {
		return s
	}
	b := built(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartStack(ctx, mode, b)
	if err != nil {
		t.Fatalf("start %s stack: %v", mode, err)
	}
	stacks[mode] = s
	return s
}
