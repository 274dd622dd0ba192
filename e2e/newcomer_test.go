package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeRunAsANewcomer runs the README's first command, `make run`, the
// way a newcomer does: in a fresh directory holding the repository's files
// (made by os.MkdirTemp, so 0700 and, in CI, root's, which the postgres OS
// user cannot enter), as the user the tests run as, with nothing prepared.
// It waits for /readyz, presses Ctrl-C (SIGINT to the whole foreground
// process group, make included, as a terminal does) and requires a clean
// stop: no error from make or countersign, PostgreSQL stopped. Then it does
// it all again on the same directory, as every later run does.
func TestMakeRunAsANewcomer(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is not installed: the README's first command needs it (%v)", err)
	}
	dir := freshCopyOfTheRepository(t)
	// As root the cluster lives outside the 0700 directory, in the system's
	// temporary directory: it is this test's to remove, after both runs.
	moved := map[string]bool{}
	t.Cleanup(func() {
		for d := range moved {
			_ = os.RemoveAll(d)
		}
	})
	for _, run := range []string{"first run in a fresh directory", "second run on the same directory"} {
		t.Run(run, func(t *testing.T) {
			grpcAddr, httpAddr, mockAddr := freeAddr(t), freeAddr(t), freeAddr(t)
			env := []string{
				"COUNTERSIGN_GRPC_ADDR=" + grpcAddr, "COUNTERSIGN_HTTP_ADDR=" + httpAddr,
				"COUNTERSIGN_MOCKRAIL_ADDR=" + mockAddr,
			}
			env = append(env, devEgressEnv(t)...)
			cmd := exec.Command("make", "run")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, like a terminal's foreground job
			out := &lockedBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

			// Building two binaries in a new directory can take minutes on a
			// busy machine; the deadline is for a hang, not a measurement.
			if err := waitReadyOrExit(t.Context(), "http://"+httpAddr+"/readyz", exited, 8*time.Minute); err != nil {
				t.Fatalf("make run: %v\n%s", err, out.String())
			}
			printed := out.String()
			for _, want := range []string{"Countersign (dev) is up", grpcAddr, "http://" + httpAddr + "/readyz", "Ctrl-C"} {
				if !strings.Contains(printed, want) {
					t.Fatalf("make run printed no %q:\n%s", want, printed)
				}
			}
			pgDir := regexp.MustCompile(`starting PostgreSQL in (\S+)`).FindStringSubmatch(printed)
			if pgDir == nil {
				t.Fatalf("make run did not say where PostgreSQL keeps its data:\n%s", printed)
			}
			if base := filepath.Dir(pgDir[1]); strings.HasPrefix(filepath.Base(base), "countersign-dev-") && !strings.HasPrefix(base, dir) {
				moved[base] = true
			}

			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				// make re-raises the SIGINT it got on itself once its child is
				// done (GNU make's fatal_error_signal), so its own status is
				// "interrupted" whatever the child did; the child's failure
				// would show as "make: *** … Error N" in the output.
				var ee *exec.ExitError
				interrupted := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT
				if err != nil && !interrupted {
					t.Fatalf("make run ended with %v after Ctrl-C:\n%s", err, out.String())
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("make run did not stop within 2 minutes of Ctrl-C:\n%s", out.String())
			}
			final := out.String()
			for _, bad := range []string{"make: ***", "countersign: ", "panic:"} {
				if strings.Contains(final, bad) {
					t.Fatalf("Ctrl-C did not stop make run cleanly (%q in the output):\n%s", bad, final)
				}
			}
			if _, err := os.Stat(filepath.Join(pgDir[1], "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("PostgreSQL still running after make run stopped (%s/postmaster.pid: %v)", pgDir[1], err)
			}
		})
		if t.Failed() {
			return
		}
	}
}

// devEgressEnv sets every egress listener address of `dev` to a free port,
// found from its flags, so the test never collides with a default port.
func devEgressEnv(t *testing.T) []string {
	t.Helper()
	help, err := exec.Command(filepath.Join(bin, "countersign-dev"), "dev", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("countersign-dev dev --help: %v\n%s", err, help)
	}
	var env []string
	for _, m := range regexp.MustCompile(`--([a-z-]*egress[a-z-]*-addr)\b`).FindAllStringSubmatch(string(help), -1) {
		env = append(env, "COUNTERSIGN_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))+"="+freeAddr(t))
	}
	if len(env) == 0 {
		t.Fatalf("dev has no egress listener flag:\n%s", help)
	}
	return env
}

// freshCopyOfTheRepository copies the files git tracks (as they are in the
// working tree) into a new temporary directory, as a fresh clone would have
// them.
func freshCopyOfTheRepository(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ls := exec.Command("git", "ls-files", "-z", "--cached")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	dir, err := os.MkdirTemp("", "countersign-newcomer-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := 0
	seen := map[string]bool{}
	for name := range bytes.SplitSeq(bytes.TrimRight(list, "\x00"), []byte{0}) {
		rel := string(name)
		if seen[rel] {
			continue // a path in a merge lists once per stage
		}
		seen[rel] = true
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, dst, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 100 {
		t.Fatalf("copied only %d files from %s", n, root)
	}
	return dir
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// waitReadyOrExit polls url until it answers 200, the process exits, or
// within passes.
func waitReadyOrExit(ctx context.Context, url string, exited <-chan error, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before %s was ready: %w", url, err)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s (last: %s)", url, within, last)
		case <-tick.C:
		}
	}
}
