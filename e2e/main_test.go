package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/freeport"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// bin is the directory holding the binaries built for this test run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "countersign-e2e-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	for _, args := range [][]string{
		{"build", "-o", bin + "/", "../cmd/countersign", "../cmd/countersign-dev", "../cmd/mockrail"},
		// The chaos build carries the kill points; a normal build cannot arm them.
		{"build", "-tags", "chaos", "-o", bin + "/countersign-chaos", "../cmd/countersign"},
	} {
		build := exec.Command("go", args...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build:", err)
			os.Exit(1)
		}
	}
	pgtest.Main(removeAfter{m, dir}, func(ctx context.Context, url string) error {
		_, err := ledger.Migrate(ctx, url, nil)
		return err
	})
}

// removeAfter runs the tests, then removes the built binaries (pgtest.Main
// exits the process, so a defer in TestMain would not run).
type removeAfter struct {
	m   *testing.M
	dir string
}

func (r removeAfter) Run() int {
	defer os.RemoveAll(r.dir)
	return r.m.Run()
}

// envoySocket is a Unix socket address for a countersign's Envoy listener
// (ext_authz, ext_proc), in a directory of its own.
func envoySocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cs-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return "unix:" + filepath.Join(dir, "envoy.sock")
}

// freeAddr returns a loopback address nobody listens on, below the
// ephemeral range (internal/testing/freeport says why).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// proc is a started binary whose output is kept for failure messages.
type proc struct {
	cmd *exec.Cmd
	out *lockedBuffer
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return p
}

// stop sends sig and waits for the process to exit within the deadline.
func (p *proc) stop(t *testing.T, sig os.Signal, within time.Duration) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		t.Fatalf("process did not exit within %s of %v", within, sig)
		return nil
	}
}

// waitStatus polls url until it answers want or the deadline passes.
func waitStatus(t *testing.T, url string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := 0
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			last = resp.StatusCode
			resp.Body.Close()
			if last == want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer %d within %s (last %d)", url, want, within, last)
}
