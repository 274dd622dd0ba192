package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestAgentInThePodCannotObtainTheRailKey plays the agent's process in
// the pod: it shares the network namespace with countersign, so it can
// connect to every TCP port countersign listens on (found from /proc, not
// from what the test configured). On each it asks ext_authz for an ALLOW
// of a refund it is entitled to, with its own valid credential, and opens
// an ext_proc stream: nowhere may it get an answer, let alone the rail key,
// and the rail's journal must show no money moved. The same refund through
// Envoy (the stand-in, over the socket) is allowed, so the request was one
// that would have been answered.
func TestAgentInThePodCannotObtainTheRailKey(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	e.payment("stripe", "pi_neighbour", 10000, "usd")
	ports := listeningTCP(t, e.countersig.cmd.Process.Pid)
	if len(ports) < 2 {
		t.Fatalf("countersign listens on %v; want at least the gRPC API and HTTP", ports)
	}
	check := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"rail_account": stripeAccount, "rail_host": "api.stripe.com"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "neighbour", Method: "POST", Host: "stripe.egress.local:15001", Path: "/v1/refunds",
			Headers: map[string]string{"authorization": "Bearer " + e.secret, "content-type": "application/x-www-form-urlencoded",
				"content-length": "38"},
			RawBody: []byte("payment_intent=pi_neighbour&amount=100"),
		}}}}
	for _, addr := range ports {
		t.Run(addr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp, checkErr := authv3.NewAuthorizationClient(conn).Check(ctx, check)
			if checkErr == nil {
				t.Fatalf("%s answered ext_authz: %v", addr, resp)
			}
			if strings.Contains(checkErr.Error(), stripeKey) {
				t.Fatalf("%s put the rail key in an error: %v", addr, checkErr)
			}
			st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
			if err == nil {
				_ = st.Send(&extprocv3.ProcessingRequest{})
				_, err = st.Recv()
			}
			if err == nil {
				t.Fatalf("%s answered ext_proc", addr)
			}
			t.Logf("%s: ext_authz %s, ext_proc %s", addr, status.Code(checkErr), status.Code(err))
		})
	}
	if n := e.journal().effectsOn("pi_neighbour"); n != 0 {
		t.Fatalf("%d refunds on pi_neighbour after the neighbour's attempts, want none", n)
	}
	// The same refund through Envoy's path is allowed: the refusals above
	// are the listeners', not the request's.
	if r := e.stripeRefund(nil, url.Values{"payment_intent": {"pi_neighbour"}, "amount": {"100"}}); r.Status != 200 {
		t.Fatalf("the refund through Envoy: %d %s", r.Status, r.Body)
	}
	if n := e.journal().effectsOn("pi_neighbour"); n != 1 {
		t.Fatalf("%d refunds on pi_neighbour through Envoy, want 1", n)
	}
	// The Envoy listener is a socket whose directory the test made private.
	path, ok := strings.CutPrefix(e.envoyAddr, "unix:")
	if !ok {
		t.Fatalf("the Envoy listener is %q, not a socket", e.envoyAddr)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm()&0o007 != 0 {
		t.Fatalf("Envoy socket %s: %v, %v; want a socket closed to others", path, fi, err)
	}
}

// listeningTCP lists the TCP addresses process pid listens on, read from
// /proc: its socket inodes, matched against the kernel's LISTEN sockets.
func listeningTCP(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			const listen = "0A"
			if len(fields) < 10 || fields[3] != listen || !inodes[fields[9]] {
				continue
			}
			addr, err := procAddr(fields[1])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, addr)
		}
		f.Close()
	}
	return out
}

// procAddr decodes /proc/net/tcp's "0100007F:1F90" (little-endian words)
// into a dialable address, wildcard addresses as loopback.
func procAddr(s string) (string, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("bad address %q", s)
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil {
		return "", err
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		for j := range 4 {
			ip[i+j] = raw[i+3-j]
		}
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return "", err
	}
	if ip.IsUnspecified() {
		if len(raw) == 4 {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10)), nil
}
