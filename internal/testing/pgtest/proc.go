package pgtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverCredential says who runs initdb and postgres: nil (the current user) unless the
// process is root, which initdb refuses; then the "postgres" OS user.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, so the server must run as the postgres OS user (initdb and PgBouncer refuse root), but: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: postgres gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// chownTo gives path to cred's user; a no-op when cred is nil.
func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Lchown(path, int(cred.Uid), int(cred.Gid))
}

// checkReachable fails clearly when cred's user (the postgres OS user, when running as
// root) cannot enter dir and every directory above it: root-only homes and t.TempDir's
// 0700 parents are the usual culprits.
func checkReachable(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			mode := fi.Mode().Perm()
			canEnter := mode&0o001 != 0 ||
				(st.Uid == cred.Uid && mode&0o100 != 0) ||
				(st.Gid == cred.Gid && mode&0o010 != 0)
			if !canEnter {
				return fmt.Errorf("pgtest: running as root, the server runs as the postgres OS user, which cannot enter %s (mode %v, owner uid %d); "+
					"put the data directory somewhere it can reach, such as under %s", d, mode, st.Uid, os.TempDir())
			}
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}

// processAlive reports whether pid names a live process. A zombie counts as dead: it
// holds no memory (no shared memory attachment) and, when reparented to an init that does
// not reap, may stay a zombie for ever.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if state, _, ok := parseStat(stat); ok && (state == "Z" || state == "X") {
			return false
		}
	}
	return true
}

// parseStat returns the state and parent pid from a /proc/<pid>/stat line. The command
// name in parentheses may itself contain spaces and parentheses, so fields are counted
// from the last ')'.
func parseStat(stat []byte) (state string, ppid int, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return "", 0, false
	}
	return f[0], ppid, true
}

// childPIDs lists the live children of ppid, from /proc where it exists, else from pgrep.
func childPIDs(ppid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "pgrep", "-P", strconv.Itoa(ppid)).Output()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && exitErr.ExitCode() == 1 {
			return nil, nil // no children
		}
		if err != nil {
			return nil, fmt.Errorf("pgtest: list children of %d: %w", ppid, err)
		}
		var pids []int
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids, nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited while we looked
		}
		if state, parent, ok := parseStat(stat); ok && parent == ppid && state != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// waitUntil polls cond every interval until it holds, ctx ends or timeout passes.
func waitUntil(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
	return true
}

const (
	tempDirPrefix = "countersign-pgtest-"
	ownerFile     = "owner"
)

// writeOwner records which process created a temporary cluster directory, so a later
// run can remove it if that process died without cleaning up (a panic in a test
// goroutine or a -timeout abort skips deferred cleanup).
func writeOwner(base string) error {
	host, _ := os.Hostname()
	return os.WriteFile(filepath.Join(base, ownerFile), fmt.Appendf(nil, "%s %d\n", host, os.Getpid()), 0o600)
}

// sweepStale removes temporary cluster directories left by dead processes on this host
// whose server is no longer running. Anything it cannot prove abandoned is left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	host, _ := os.Hostname()
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		var ownerHost string
		var ownerPID int
		if _, err := fmt.Sscanf(string(owner), "%s %d", &ownerHost, &ownerPID); err != nil {
			continue
		}
		if ownerHost != host || processAlive(ownerPID) {
			continue
		}
		if pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			first, _, _ := strings.Cut(string(pidFile), "\n")
			if pm, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && processAlive(pm) {
				continue
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// KeptDataDir returns where a cluster that is kept between runs for dir
// should live. Unless running as root, or when the postgres OS user can reach
// dir, that is dir itself. Otherwise (a root-only home, a 0700 temporary
// directory) it is a directory of the postgres user under os.TempDir() named
// for dir, the same on every run; moved reports that.
func KeptDataDir(dir string) (dataDir string, moved bool, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false, fmt.Errorf("pgtest: %w", err)
	}
	cred, err := serverCredential()
	if err != nil || cred == nil {
		return abs, false, err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return "", false, fmt.Errorf("pgtest: %w", err)
	}
	if checkReachable(filepath.Dir(abs), cred) == nil {
		return abs, false, nil
	}
	sum := sha256.Sum256([]byte(abs))
	base := filepath.Join(os.TempDir(), fmt.Sprintf("countersign-dev-%x", sum[:8]))
	if err := os.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", false, fmt.Errorf("pgtest: %w", err)
	}
	// The name is predictable: refuse anything there that is not a plain
	// directory of root or the postgres user (a symlink planted by another
	// local user, say).
	fi, err := os.Lstat(base)
	if err != nil {
		return "", false, fmt.Errorf("pgtest: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || (st.Uid != 0 && st.Uid != cred.Uid) || fi.Mode().Perm()&0o022 != 0 {
		return "", false, fmt.Errorf("pgtest: %s exists but is not a private directory of root or the postgres user; remove it", base)
	}
	if err := chownTo(base, cred); err != nil {
		return "", false, fmt.Errorf("pgtest: %w", err)
	}
	return filepath.Join(base, "pg"), true, nil
}

// ServerCredential says who runs a server the tests start (the cluster,
// and beside it PgBouncer): nil for the current user, the postgres OS user
// when running as root.
func ServerCredential() (*syscall.Credential, error) { return serverCredential() }

// ChownTo gives path to cred's user; a no-op when cred is nil.
func ChownTo(path string, cred *syscall.Credential) error { return chownTo(path, cred) }

// FreePort is a loopback port nothing listens on now.
func FreePort(ctx context.Context) (int, error) { return freePort(ctx) }
