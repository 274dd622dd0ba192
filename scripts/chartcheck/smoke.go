package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/rails"
)

// unreachableLedger stands in for the database Secret: nothing listens on
// port 1, so serve must start, stay alive and report not-ready.
const unreachableLedger = "postgres://chartcheck@127.0.0.1:1/countersign?connect_timeout=1"

// smoke starts the real `countersign serve` the way the countersign
// container would: its args, its literal environment (settings included),
// and its files — the rails file from the ConfigMap, a dummy key file at
// every key_file, the socket directory — placed under a temporary root.
// The database URL (a Secret) is replaced by an unreachable ledger and the
// HTTP port by a free one. It requires what the pod relies on: serve
// accepts every rendered setting and the rails file, creates its gRPC
// socket 0660 at COUNTERSIGN_ENVOY_ADDR, answers the liveness probe's
// /healthz with 200 and the readiness probe's /readyz with 503 while the
// ledger is unreachable, and stops on SIGTERM.
func smoke(bin string, eg *egress) (string, error) {
	if eg == nil || eg.countersign == nil {
		return "", errors.New("no countersign container")
	}
	root, err := os.MkdirTemp("", "chartcheck-serve-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(root) }()
	under := func(p string) string { return filepath.Join(root, filepath.Clean("/"+p)) }

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "TMPDIR=" + root}
	var sock, httpHostPort string
	for _, e := range eg.countersign.Env {
		switch {
		case e.Name == "COUNTERSIGN_DATABASE_URL":
			env = append(env, e.Name+"="+unreachableLedger)
		case e.Value == nil:
			return "", fmt.Errorf("%s: only the database URL may come from elsewhere than a literal value", e.Name)
		case e.Name == "COUNTERSIGN_ENVOY_ADDR" || e.Name == "COUNTERSIGN_GRPC_ADDR":
			p, ok := strings.CutPrefix(*e.Value, "unix:")
			if !ok {
				return "", fmt.Errorf("%s is %q, not a unix socket", e.Name, *e.Value)
			}
			placed := under(p)
			if err := os.MkdirAll(filepath.Dir(placed), 0o750); err != nil {
				return "", err
			}
			if e.Name == "COUNTERSIGN_ENVOY_ADDR" {
				sock = placed
			}
			env = append(env, e.Name+"=unix:"+placed)
		case e.Name == "COUNTERSIGN_HTTP_ADDR":
			host, _, err := net.SplitHostPort(*e.Value)
			if err != nil {
				return "", fmt.Errorf("%s: %w", e.Name, err)
			}
			port, err := freePort(ctx)
			if err != nil {
				return "", err
			}
			env = append(env, e.Name+"="+net.JoinHostPort(host, strconv.Itoa(port)))
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			httpHostPort = net.JoinHostPort(host, strconv.Itoa(port))
		case e.Name == "COUNTERSIGN_AUDIT_SIGNING_KEY":
			// A key of the real shape where the Secret would be mounted.
			skey, _, err := audit.GenerateKey("chartcheck.audit")
			if err != nil {
				return "", err
			}
			if err := writeFile(under(*e.Value), []byte(skey+"\n")); err != nil {
				return "", err
			}
			env = append(env, e.Name+"="+under(*e.Value))
		case e.Name == "COUNTERSIGN_RAILS_FILE":
			p, err := placeRails(eg.railsData, under)
			if err != nil {
				return "", err
			}
			if err := writeFile(under(*e.Value), p); err != nil {
				return "", err
			}
			env = append(env, e.Name+"="+under(*e.Value))
		default:
			env = append(env, e.Name+"="+*e.Value)
		}
	}
	if sock == "" || httpHostPort == "" {
		return "", errors.New("the container sets no COUNTERSIGN_ENVOY_ADDR or COUNTERSIGN_HTTP_ADDR")
	}

	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, eg.countersign.Args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, root, &logs, &logs
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			killed := <-exited
			return fmt.Errorf("serve did not stop within 30s of SIGTERM (killed: %w)", killed)
		}
	}
	fail := func(format string, args ...any) (string, error) {
		_ = stop()
		return "", fmt.Errorf("%s\n--- serve's log:\n%s", fmt.Sprintf(format, args...), logs.String())
	}

	// The liveness probe: up, whatever the ledger.
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			return "", fmt.Errorf("serve exited at start: %w\n--- serve's log:\n%s", err, logs.String())
		default:
		}
		if code, err := get(ctx, httpHostPort, "/healthz"); err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return fail("GET /healthz did not answer 200 within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The readiness probe: not ready without a ledger.
	if code, err := get(ctx, httpHostPort, "/readyz"); err != nil || code != http.StatusServiceUnavailable {
		return fail("GET /readyz with the ledger unreachable: got %d, %v; want 503", code, err)
	}
	// The socket Envoy dials: where the chart says, group-accessible only.
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return fail("no Unix socket at COUNTERSIGN_ENVOY_ADDR (%s): %v", sock, err)
	}
	if perm := fi.Mode().Perm(); perm != 0o660 {
		return fail("the socket is %o, want 660 (Envoy reaches it through the pod's fsGroup)", perm)
	}
	if err := stop(); err != nil {
		return "", fmt.Errorf("after SIGTERM: %w\n--- serve's log:\n%s", err, logs.String())
	}
	return "accepted every setting and the rails file; /healthz 200, /readyz 503 without a ledger, socket 0660; stopped on SIGTERM", nil
}

// placeRails rewrites the rails file's key files under the temporary root
// and writes a dummy key of the rail's shape at each.
func placeRails(data string, under func(string) string) ([]byte, error) {
	var f rails.File
	if err := yaml.UnmarshalStrict([]byte(data), &f); err != nil {
		return nil, err
	}
	for i, a := range f.Rails {
		key := "sk_test_chartcheck"
		if a.Rail == "razorpay" {
			key = "rzp_test_chartcheck:chartcheck"
		}
		f.Rails[i].KeyFile = under(a.KeyFile)
		if err := writeFile(f.Rails[i].KeyFile, []byte(key+"\n")); err != nil {
			return nil, err
		}
	}
	return yaml.Marshal(f)
}

func writeFile(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o600)
}

func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func get(ctx context.Context, hostPort, path string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode, nil
}
