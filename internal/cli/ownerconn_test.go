package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestServerTarget: --server is a unix socket or host:port; only a unix
// socket or a loopback host counts as this machine, where the owner token
// may go without TLS.
func TestServerTarget(t *testing.T) {
	for _, tc := range []struct {
		name, server, target string
		local                bool
		wantErr              string
	}{
		{name: "ipv4 loopback", server: "127.0.0.1:9191", target: "dns:///127.0.0.1:9191", local: true},
		{name: "all of 127/8", server: "127.1.2.3:9191", target: "dns:///127.1.2.3:9191", local: true},
		{name: "ipv6 loopback", server: "[::1]:9191", target: "dns:///[::1]:9191", local: true},
		{name: "v4-mapped loopback", server: "[::ffff:127.0.0.1]:9191", target: "dns:///[::ffff:127.0.0.1]:9191", local: true},
		{name: "localhost", server: "localhost:9191", target: "dns:///localhost:9191", local: true},
		{name: "localhost any case", server: "LocalHost:9191", target: "dns:///LocalHost:9191", local: true},
		{name: "unix socket", server: "unix:/var/run/countersign/api.sock", target: "unix:///var/run/countersign/api.sock", local: true},
		{name: "unix socket, url form", server: "unix:///var/run/countersign/api.sock", target: "unix:///var/run/countersign/api.sock", local: true},
		{name: "private address", server: "10.0.0.7:9191", target: "dns:///10.0.0.7:9191"},
		{name: "any address", server: "0.0.0.0:9191", target: "dns:///0.0.0.0:9191"},
		{name: "ipv6 any", server: "[::]:9191", target: "dns:///[::]:9191"},
		{name: "host name", server: "countersign.example.com:443", target: "dns:///countersign.example.com:443"},
		{name: "localhost look-alike", server: "localhost.example.com:9191", target: "dns:///localhost.example.com:9191"},
		{name: "loopback look-alike", server: "127.0.0.1.nip.io:9191", target: "dns:///127.0.0.1.nip.io:9191"},
		{name: "a scheme as host", server: "unix-abstract:9191", target: "dns:///unix-abstract:9191"},
		{name: "url", server: "https://countersign.example.com:443", wantErr: `must be host:port or unix:/path (an address, not a URL: for TLS add --tls`},
		{name: "grpc target", server: "dns:///10.0.0.7:9191", wantErr: "must be host:port or unix:/path"},
		{name: "no port", server: "10.0.0.7", wantErr: "must be host:port or unix:/path"},
		{name: "named port", server: "unix-abstract:sock", wantErr: "must be host:port or unix:/path"},
		{name: "port out of range", server: "127.0.0.1:70000", wantErr: "must be host:port or unix:/path"},
		{name: "no host", server: ":9191", wantErr: `names no host: say 127.0.0.1:9191`},
		{name: "no socket path", server: "unix:", wantErr: "names no socket path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, local, err := serverTarget(tc.server)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("serverTarget(%q) = %v, want an error containing %q", tc.server, err, tc.wantErr)
				}
				return
			}
			if err != nil || target != tc.target || local != tc.local {
				t.Fatalf("serverTarget(%q) = %q, local %v, %v; want %q, local %v", tc.server, target, local, err, tc.target, tc.local)
			}
		})
	}
}

// TestOwnerTokenNotInPlaintextOffMachine: the owner token goes without TLS
// only to a loopback address or a unix socket; to any other TCP address
// the CLI refuses before it connects, naming --insecure-plaintext, and
// with that flag it sends it and says so on stderr. (0.0.0.0 is not
// loopback, yet on Linux a connection to it reaches this machine, so the
// test can watch what arrives.)
func TestOwnerTokenNotInPlaintextOffMachine(t *testing.T) {
	f := &fakeOwner{approvals: heldApprovals()}
	addr := startFakeOwner(t, f)
	_, port, _ := net.SplitHostPort(addr)
	remote := net.JoinHostPort("0.0.0.0", port)

	for _, server := range []string{remote, "countersign.invalid:443"} {
		r := runCLI(t, "", "approvals", "list", "--server", server, "--owner-token", "cso_test")
		want := "refusing to send the owner token in plaintext to " + server
		if r.err == nil || !strings.Contains(r.err.Error(), want) || !strings.Contains(r.err.Error(), "--insecure-plaintext") {
			t.Errorf("approvals list --server %s = %v, want a refusal naming --insecure-plaintext", server, r.err)
		}
	}
	if f.token != "" {
		t.Fatalf("the owner API got %q after a refusal", f.token)
	}

	r := runCLI(t, "", "approvals", "list", "--server", addr, "--owner-token", "cso_test")
	if r.err != nil || f.token != "Bearer cso_test" || r.errOut != "" {
		t.Fatalf("to loopback: %v, token %q, stderr %q", r.err, f.token, r.errOut)
	}

	f.token = ""
	r = runCLI(t, "", "approvals", "list", "--server", remote, "--owner-token", "cso_test", "--insecure-plaintext")
	if r.err != nil || f.token != "Bearer cso_test" {
		t.Fatalf("with --insecure-plaintext: %v, token %q", r.err, f.token)
	}
	if !strings.Contains(r.errOut, "warning: --insecure-plaintext: the owner token goes to "+remote+" without TLS") {
		t.Errorf("with --insecure-plaintext, stderr = %q, want a warning", r.errOut)
	}
}

// TestOwnerTLS: --tls, --server-ca and --tls-server-name (or their
// variables) dial TLS and verify the server's certificate; then the token
// may go to any address, and a recording relay on the way sees no token.
func TestOwnerTLS(t *testing.T) {
	dir := t.TempDir()
	ipCert, ipCA := testCertificate(t, dir, "ip", []string{"owner.test"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	nameCert, nameCA := testCertificate(t, dir, "name", []string{"owner.test"}, nil)
	_, otherCA := testCertificate(t, dir, "other", []string{"owner.test"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	ipOwner, nameOwner := &fakeOwner{approvals: heldApprovals()}, &fakeOwner{approvals: heldApprovals()}
	ipAddr, nameAddr := startTLSOwner(t, ipOwner, ipCert), startTLSOwner(t, nameOwner, nameCert)
	relay, wire := recordingRelay(t, ipAddr)
	_, namePort, _ := net.SplitHostPort(nameAddr)

	const token = "cso_tls_secret_owner_token_0123456789"
	for _, tc := range []struct {
		name    string
		owner   *fakeOwner
		env     map[string]string
		args    []string
		wantErr string
	}{
		{name: "server-ca", owner: ipOwner, args: []string{"--server", relay, "--server-ca", ipCA}},
		{name: "tls and server-ca", owner: ipOwner, args: []string{"--server", ipAddr, "--tls", "--server-ca", ipCA}},
		{name: "server-ca from the environment", owner: ipOwner, env: map[string]string{"COUNTERSIGN_SERVER_CA": ipCA}, args: []string{"--server", ipAddr}},
		{name: "tls from the environment", owner: ipOwner, env: map[string]string{"COUNTERSIGN_TLS": "true"}, args: []string{"--server", ipAddr},
			wantErr: "certificate signed by unknown authority"},
		{name: "tls-server-name", owner: nameOwner, args: []string{"--server", nameAddr, "--server-ca", nameCA, "--tls-server-name", "owner.test"}},
		{name: "tls off this machine needs no override", owner: nameOwner,
			args: []string{"--server", net.JoinHostPort("0.0.0.0", namePort), "--server-ca", nameCA, "--tls-server-name", "owner.test"}},
		{name: "tls-server-name from the environment", owner: nameOwner, env: map[string]string{"COUNTERSIGN_TLS_SERVER_NAME": "owner.test"},
			args: []string{"--server", nameAddr, "--server-ca", nameCA}},
		{name: "system roots do not know the CA", owner: ipOwner, args: []string{"--server", ipAddr, "--tls"},
			wantErr: "certificate signed by unknown authority"},
		{name: "another CA", owner: ipOwner, args: []string{"--server", ipAddr, "--server-ca", otherCA}, wantErr: "certificate signed by unknown authority"},
		{name: "the certificate's name is checked", owner: nameOwner, args: []string{"--server", nameAddr, "--server-ca", nameCA},
			wantErr: "doesn't contain any IP SANs"},
		{name: "the wrong server name", owner: nameOwner, args: []string{"--server", nameAddr, "--server-ca", nameCA, "--tls-server-name", "other.test"},
			wantErr: "not other.test"},
		{name: "plaintext to a TLS server", owner: ipOwner, args: []string{"--server", ipAddr}, wantErr: "Unavailable"},
		{name: "insecure-plaintext contradicts tls", owner: ipOwner, args: []string{"--server", ipAddr, "--server-ca", ipCA, "--insecure-plaintext"},
			wantErr: "--insecure-plaintext contradicts TLS"},
		{name: "insecure-plaintext contradicts a tls variable", owner: ipOwner, env: map[string]string{"COUNTERSIGN_TLS": "1"},
			args: []string{"--server", ipAddr, "--insecure-plaintext"}, wantErr: "--insecure-plaintext contradicts TLS"},
		{name: "a tls variable that is no boolean", owner: ipOwner, env: map[string]string{"COUNTERSIGN_TLS": "yes please"},
			args: []string{"--server", ipAddr}, wantErr: `COUNTERSIGN_TLS="yes please" is not true or false`},
		{name: "a server-ca that is no PEM", owner: ipOwner, args: []string{"--server", ipAddr, "--server-ca", filepath.Join(dir, "ip.key")},
			wantErr: "holds no PEM certificate"},
		{name: "a missing server-ca", owner: ipOwner, args: []string{"--server", ipAddr, "--server-ca", filepath.Join(dir, "absent.pem")},
			wantErr: "server-ca: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tc.owner.token = ""
			r := runCLI(t, "", append([]string{"approvals", "list", "--owner-token", token}, tc.args...)...)
			if tc.wantErr != "" {
				if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
					t.Fatalf("approvals list = %v, want an error containing %q", r.err, tc.wantErr)
				}
				if tc.owner.token != "" {
					t.Fatalf("the owner API got the token %q", tc.owner.token)
				}
				return
			}
			if r.err != nil || tc.owner.token != "Bearer "+token {
				t.Fatalf("approvals list = %v (%s), the owner API got %q", r.err, r.errOut, tc.owner.token)
			}
		})
	}
	if w := wire(); len(w) == 0 || bytes.Contains(w, []byte(token)) {
		t.Fatalf("the relay saw %d bytes, the token among them: %v", len(w), bytes.Contains(w, []byte(token)))
	}
}

// TestOwnerTLSFlagBeatsItsVariable: flags come before the environment, so
// --tls=false turns off COUNTERSIGN_TLS=true.
func TestOwnerTLSFlagBeatsItsVariable(t *testing.T) {
	f := &fakeOwner{approvals: heldApprovals()}
	addr := startFakeOwner(t, f)
	t.Setenv("COUNTERSIGN_TLS", "true")
	if r := runCLI(t, "", "approvals", "list", "--server", addr, "--owner-token", "cso_test", "--tls=false"); r.err != nil || f.token != "Bearer cso_test" {
		t.Fatalf("--tls=false over COUNTERSIGN_TLS=true: %v, token %q", r.err, f.token)
	}
}

// TestOwnerTokenFile: --owner-token-file (or its variable) reads the
// token from a file, without the line ending; one source only.
func TestOwnerTokenFile(t *testing.T) {
	f := &fakeOwner{approvals: heldApprovals()}
	addr := startFakeOwner(t, f)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lf, crlf, bare := file("lf", "cso_file\n"), file("crlf", "cso_file\r\n"), file("bare", "cso_file")
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		wantToken string
		wantErr   string
	}{
		{name: "newline", args: []string{"--owner-token-file", lf}, wantToken: "cso_file"},
		{name: "crlf", args: []string{"--owner-token-file", crlf}, wantToken: "cso_file"},
		{name: "no newline", args: []string{"--owner-token-file", bare}, wantToken: "cso_file"},
		{name: "variable", env: map[string]string{"COUNTERSIGN_OWNER_TOKEN_FILE": lf}, wantToken: "cso_file"},
		{name: "token variable", env: map[string]string{"COUNTERSIGN_OWNER_TOKEN": "cso_env"}, wantToken: "cso_env"},
		{name: "a flag beats the variables", env: map[string]string{"COUNTERSIGN_OWNER_TOKEN": "cso_env", "COUNTERSIGN_OWNER_TOKEN_FILE": lf},
			args: []string{"--owner-token", "cso_flag"}, wantToken: "cso_flag"},
		{name: "the file flag beats the token variable", env: map[string]string{"COUNTERSIGN_OWNER_TOKEN": "cso_env"},
			args: []string{"--owner-token-file", lf}, wantToken: "cso_file"},
		{name: "both flags", args: []string{"--owner-token", "cso_flag", "--owner-token-file", lf},
			wantErr: "both --owner-token and --owner-token-file are set"},
		{name: "both variables", env: map[string]string{"COUNTERSIGN_OWNER_TOKEN": "cso_env", "COUNTERSIGN_OWNER_TOKEN_FILE": lf},
			wantErr: "both COUNTERSIGN_OWNER_TOKEN and COUNTERSIGN_OWNER_TOKEN_FILE are set"},
		{name: "empty", args: []string{"--owner-token-file", file("empty", "\n")}, wantErr: "is empty"},
		{name: "two lines", args: []string{"--owner-token-file", file("two", "cso_a\ncso_b\n")}, wantErr: "holds more than one token: a space, line break or control character at byte 5"},
		{name: "two newlines", args: []string{"--owner-token-file", file("nl2", "cso_a\n\n")}, wantErr: "holds more than one token"},
		{name: "missing", args: []string{"--owner-token-file", filepath.Join(dir, "absent")}, wantErr: "owner token file: open"},
		{name: "none", wantErr: "an owner token is needed: --owner-token-file, --owner-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("COUNTERSIGN_OWNER_TOKEN", "")
			t.Setenv("COUNTERSIGN_OWNER_TOKEN_FILE", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f.token = ""
			r := runCLI(t, "", append([]string{"approvals", "list", "--server", addr}, tc.args...)...)
			if tc.wantErr != "" {
				if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
					t.Fatalf("approvals list = %v, want an error containing %q", r.err, tc.wantErr)
				}
				return
			}
			if r.err != nil || f.token != "Bearer "+tc.wantToken {
				t.Fatalf("approvals list = %v, the owner API got %q, want Bearer %s", r.err, f.token, tc.wantToken)
			}
		})
	}
}

// startTLSOwner serves f over TLS with cert on 127.0.0.1.
func startTLSOwner(t *testing.T, f countersignv1.OwnerServiceServer, cert tls.Certificate) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	countersignv1.RegisterOwnerServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// testCertificate makes a self-signed server certificate for dnsNames and
// ips, and writes it (its own CA) to dir/name.pem and its key to
// dir/name.key.
func testCertificate(t *testing.T, dir, name string, dnsNames []string, ips []net.IP) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, DNSNames: dnsNames, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	caPath := filepath.Join(dir, name+".pem")
	if err := os.WriteFile(caPath, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert, caPath
}

// recordingRelay forwards connections on 127.0.0.1 to backend and keeps
// every byte the client sent, as an observer on the path would.
func recordingRelay(t *testing.T, backend string) (string, func() []byte) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen bytes.Buffer
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = lis.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Go(func() {
				_, _ = io.Copy(b, io.TeeReader(c, lockedWriter{&mu, &seen}))
				_ = b.Close()
			})
			wg.Go(func() { _, _ = io.Copy(c, b); _ = c.Close() })
		}
	})
	return lis.Addr().String(), func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(seen.Bytes())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
