//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/countersign/countersign/internal/inject"
	"github.com/countersign/countersign/internal/testing/wait"
)

// proc is one server process of the test cluster, its output in a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the exit status, once done is closed
}

// start runs bin with args, its stdout and stderr in dir/name.log. The
// process is stopped when the test ends (SIGTERM, then SIGKILL after 15 s),
// and its log's tail is printed if the test failed.
func start(t *testing.T, dir, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.Env = childEnv()
	if err := p.cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			p.dumpTail(t)
		}
	})
	return p
}

// stop ends the process and waits for it: SIGTERM, then SIGKILL.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Errorf("%s did not stop within 15s of SIGTERM; killing it", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports an error if the process has ended, so a wait on it fails
// at once instead of at its deadline.
func (p *proc) exited() error {
	select {
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("%s exited with status 0 (log %s)", p.name, p.log)
		}
		return fmt.Errorf("%s exited (log %s): %w", p.name, p.log, p.err)
	default:
		return nil
	}
}

func (p *proc) dumpTail(t *testing.T) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("last lines of %s:\n%s", p.log, strings.Join(lines, "\n"))
}

// childEnv is this process's environment without proxy settings: the API
// server calls the webhook and etcd on loopback and must not be sent
// through a proxy.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor waits until cond returns nil, the process it depends on exits,
// or the deadline passes.
func waitFor(t *testing.T, what string, deadline time.Duration, p *proc, cond func() error) {
	t.Helper()
	start := time.Now()
	var err, perr error
	if !wait.Until(deadline, func() bool {
		if err = cond(); err == nil {
			return true
		}
		if p != nil {
			perr = p.exited()
		}
		return perr != nil
	}) {
		t.Fatalf("%s: not within %s: %v", what, deadline, err)
	}
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %v)", what, perr, err)
	}
	t.Logf("%s after %s", what, time.Since(start).Round(10*time.Millisecond))
}

// pki is the test cluster's CA and what it signed.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "countersign-e2e-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	writeFile(t, filepath.Join(dir, "ca.crt"), p.caPEM)
	return p
}

// issue signs a certificate (a server's, for 127.0.0.1 and localhost, when
// server is true; else a client's) and writes name.crt and name.key.
func (p *pki) issue(t *testing.T, name string, subject pkix.Name, server bool) (certFile, keyFile string, certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = keyToPEM(t, key)
	certFile, keyFile = filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)
	return certFile, keyFile, certPEM, keyPEM
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func keyToPEM(t *testing.T, key *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// cluster is a running etcd and kube-apiserver, and an admin's client
// configuration for the API server.
type cluster struct {
	pki       *pki
	apiserver *proc
	admin     *rest.Config
}

// binaryFromEnv is a server binary the Makefile built (scripts/k8s-tools.sh).
func binaryFromEnv(t *testing.T, env string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		t.Fatalf("%s is not set: run this test with `make e2e-k8s`, which builds etcd and kube-apiserver (scripts/k8s-tools.sh) and sets it", env)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return bin
}

// startCluster starts etcd and a kube-apiserver on it, on free loopback
// ports, with their data and keys in dir, and waits until the API server's
// /readyz says ready.
func startCluster(t *testing.T, ctx context.Context, dir string) *cluster {
	t.Helper()
	etcdBin := binaryFromEnv(t, "COUNTERSIGN_E2E_ETCD")
	apiBin := binaryFromEnv(t, "COUNTERSIGN_E2E_KUBE_APISERVER")

	clientURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	etcd := start(t, dir, "etcd", etcdBin,
		"--name=e2e",
		"--data-dir="+filepath.Join(dir, "etcd-data"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL,
		"--log-level=warn",
	)
	httpc := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, "etcd healthy", 60*time.Second, etcd, func() error {
		return getOK(ctx, httpc, clientURL+"/health", `"health":"true"`)
	})

	pk := newPKI(t, dir)
	servingCert, servingKey, _, _ := pk.issue(t, "apiserver", pkix.Name{CommonName: "kube-apiserver"}, true)
	// The admin is a client certificate in system:masters: the API server
	// authorizes that group for everything, under RBAC as under any mode.
	_, _, adminCert, adminKey := pk.issue(t, "admin", pkix.Name{CommonName: "e2e-admin", Organization: []string{"system:masters"}}, false)
	// The service-account signing key, and its public half for verifying.
	sa := newKey(t)
	saDER, err := x509.MarshalECPrivateKey(sa)
	if err != nil {
		t.Fatal(err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey, saPub := filepath.Join(dir, "service-account.key"), filepath.Join(dir, "service-account.pub")
	writeFile(t, saKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}))
	writeFile(t, saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}))

	port := freePort(t)
	apiserver := start(t, dir, "kube-apiserver", apiBin,
		"--etcd-servers="+clientURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+servingCert, "--tls-private-key-file="+servingKey,
		"--client-ca-file="+filepath.Join(dir, "ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// The ServiceAccount admission plugin runs, as on every real
		// cluster: after the injector's patch it mounts the pod's token
		// into every container with nothing at its path, and the injector
		// is called again (reinvocationPolicy IfNeeded). No controller
		// manager runs, so createNamespace makes each namespace's default
		// ServiceAccount itself.
		// The kubernetes Service's endpoints would be this loopback
		// address, which the endpoint reconciler refuses; nothing here
		// reaches the API server through that Service.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=1",
	)
	admin := &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", port),
		TLSClientConfig: rest.TLSClientConfig{CAData: pk.caPEM, CertData: adminCert, KeyData: adminKey},
		Timeout:         30 * time.Second,
	}
	pair, err := tls.X509KeyPair(adminCert, adminKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(pk.caCert)
	readyc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{pair}},
	}}
	waitFor(t, "kube-apiserver /readyz", 3*time.Minute, apiserver, func() error {
		return getOK(ctx, readyc, admin.Host+"/readyz", "ok")
	})
	return &cluster{pki: pk, apiserver: apiserver, admin: admin}
}

// getOK GETs url and wants a 200 whose body contains want.
func getOK(ctx context.Context, c *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(http.MaxBytesReader(nil, resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), want) {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(body.String()))
	}
	return nil
}

// buildCountersign builds ./cmd/countersign of this repository into dir.
func buildCountersign(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "countersign")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/countersign")
	var out bytes.Buffer
	build.Stdout, build.Stderr = &out, &out
	if err := build.Run(); err != nil {
		t.Fatalf("go build ./cmd/countersign: %v\n%s", err, out.String())
	}
	return bin
}

// createNamespace creates ns and its default ServiceAccount, which a
// controller manager would (none runs here), so the ServiceAccount
// admission plugin admits pods there.
func createNamespace(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns *corev1.Namespace) {
	t.Helper()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	if _, err := kc.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the default ServiceAccount of %s: %v", ns.Name, err)
	}
}

// waitUntilInjected waits until the API server calls the webhook for a pod
// of the labelled namespace and gets it back guarded: it reads webhook
// configurations through an informer, so a dry-run create (which calls the
// webhook and stores nothing) is retried until then.
func waitUntilInjected(t *testing.T, ctx context.Context, kc kubernetes.Interface, c *cluster, what string, probe *corev1.Pod) {
	t.Helper()
	waitFor(t, what, time.Minute, c.apiserver, func() error {
		got, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got.Annotations[inject.StatusKey] != inject.StatusInjected {
			return fmt.Errorf("dry-run pod came back without %s", inject.StatusKey)
		}
		return nil
	})
}
