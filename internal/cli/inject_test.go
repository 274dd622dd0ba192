package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/inject"
	"github.com/countersign/countersign/internal/logging"
)

var goodInjectArgs = []string{
	"--tls-cert-file=/tls/tls.crt", "--tls-key-file=/tls/tls.key", "--namespace=countersign-system",
	"--countersign-image=registry.example/countersign:v0.1.0", "--envoy-image=envoyproxy/envoy:distroless-v1.40.2",
	"--envoy-configmap=countersign-envoy-sidecar", "--rails-configmap=countersign-rails", "--database-secret=countersign-database",
	"--rail-key=stripe_main=countersign-stripe-main/key", "--rail-key=razorpay_main=countersign-razorpay-main/key",
	"--base-url=STRIPE_API_BASE=http://stripe.egress.local:15001,RAZORPAY_API_BASE=http://razorpay.egress.local:15001",
}

// selfTLS turns goodInjectArgs to tls-mode self, then applies more.
func selfTLS(more ...string) []string {
	return append([]string{"--tls-cert-file=", "--tls-key-file=", "--tls-mode=self", "--tls-secret=countersign-injector-tls",
		"--webhook-config=countersign-injector", "--service=countersign-injector"}, more...)
}

// goodEgressArgs close the agent's direct egress (added to goodInjectArgs).
var goodEgressArgs = []string{
	"--close-egress", "--egress-image=registry.example/iptables:1.8.11", "--egress-agent-uid=1000",
	"--egress-close-host=api.stripe.com", "--egress-close-host=api.razorpay.com", "--egress-close-cidr=203.0.113.0/24,2001:db8::/32",
}

func injectConfig(t *testing.T, args ...string) (inject.Config, error) {
	t.Helper()
	f := defaultInjectFlags()
	fs := pflag.NewFlagSet("inject", pflag.ContinueOnError)
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.config()
}

func TestInjectFlags(t *testing.T) {
	cfg, err := injectConfig(t, goodInjectArgs...)
	if err != nil {
		t.Fatal(err)
	}
	with, err := injectConfig(t, append(append([]string{}, goodInjectArgs...), "--db-pooler=pgbouncer", "--audit-signing-key-secret=countersign-audit")...)
	if err != nil || with.DBPooler != "pgbouncer" || with.AuditKeySecret != "countersign-audit" || with.AuditKeyKey != "key" {
		t.Fatalf("pooler and audit key flags: %+v, %v", with, err)
	}
	if _, err := injectConfig(t, append(append([]string{}, goodInjectArgs...), selfTLS()...)...); err != nil {
		t.Fatalf("tls-mode self: %v", err)
	}
	egress, err := injectConfig(t, append(append([]string{}, goodInjectArgs...), goodEgressArgs...)...)
	if err != nil || !egress.Egress.Enabled || egress.Egress.Image != "registry.example/iptables:1.8.11" || egress.Egress.AgentUID != 1000 ||
		len(egress.Egress.Hosts) != 2 || egress.Egress.Hosts[1] != "api.razorpay.com" || len(egress.Egress.CIDRs) != 2 || egress.Egress.CIDRs[1] != "2001:db8::/32" {
		t.Fatalf("egress flags: %+v, %v", egress.Egress, err)
	}
	if cfg.Egress.Enabled {
		t.Fatal("egress is closed without close-egress")
	}
	if len(cfg.RailKeys) != 2 || cfg.RailKeys[1] != (inject.RailKey{Account: "razorpay_main", Secret: "countersign-razorpay-main", Key: "key"}) ||
		len(cfg.BaseURLs) != 2 || cfg.BaseURLs[0].Name != "STRIPE_API_BASE" || cfg.DatabaseKey != "url" || cfg.HTTPPort != 15080 {
		t.Fatalf("config: %+v", cfg)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no TLS", []string{"--tls-cert-file="}, "tls-cert-file and tls-key-file are required"},
		{"unknown TLS mode", []string{"--tls-mode=cert-manager"}, "tls-mode must be files or self"},
		{"self with files", selfTLS("--tls-cert-file=/tls/tls.crt"), "are for tls-mode files"},
		{"self without a Secret", selfTLS("--tls-secret="), "tls-secret must be a Kubernetes object name"},
		{"self with a bad webhook name", selfTLS("--webhook-config=Countersign_Injector"), "webhook-config must be a Kubernetes object name"},
		{"self without a Service", selfTLS("--service="), "service must be a Kubernetes object name"},
		{"self syncing too often", selfTLS("--cert-sync-interval=1s"), "cert-sync-interval must be between 10s and 1h"},
		{"rail key without a key", []string{"--rail-key=stripe_main=countersign-stripe-main"}, "account=secret/key"},
		{"base URL without a value", []string{"--base-url=STRIPE_API_BASE"}, "NAME=URL"},
		{"base URL to the rail itself", []string{"--base-url=STRIPE_API_BASE=https://api.stripe.com"}, "must be http://host:15001"},
		{"image latest", []string{"--envoy-image=envoyproxy/envoy:latest"}, "envoy-image must be pinned"},
		{"untagged image", []string{"--countersign-image=countersign"}, "countersign-image must be pinned"},
		{"no namespace", []string{"--namespace="}, "namespace must be"},
		{"pull policy", []string{"--image-pull-policy=Sometimes"}, "image-pull-policy"},
		{"database secret holds a rail key", []string{"--database-secret=countersign-stripe-main"}, "also the database-secret"},
		{"unknown pooler", []string{"--db-pooler=pgpool"}, "db-pooler must be none or pgbouncer"},
		{"audit key in the database secret", []string{"--audit-signing-key-secret=" + goodDatabaseSecret(t)}, "is also the database-secret"},
		{"audit key in a rail key's secret", []string{"--audit-signing-key-secret=countersign-stripe-main"}, "is also rail-key stripe_main's Secret"},
		{"audit key secret not a name", []string{"--audit-signing-key-secret=Not_A_Name"}, "audit-signing-key-secret must name a Secret"},
		{"audit key without a key", []string{"--audit-signing-key-secret=countersign-audit", "--audit-signing-key-secret-key=.."}, "audit-signing-key-secret-key must be a Secret key"},
	}
	egressCases := []struct {
		name string
		args []string
		want string
	}{
		{"egress settings without close-egress", []string{"--close-egress=false"}, "take effect only with close-egress"},
		{"egress without an image", []string{"--egress-image="}, "egress-image is required"},
		{"egress image latest", []string{"--egress-image=registry.example/iptables:latest"}, "egress-image must be pinned"},
		{"egress without a UID", []string{"--egress-agent-uid=0"}, "egress-agent-uid must be the agent's UID"},
		{"egress for Countersign's UID", []string{"--egress-agent-uid=65532"}, "is the injected countersign's UID"},
		{"egress for Envoy's UID", []string{"--egress-agent-uid=101"}, "is the injected Envoy's UID"},
		{"egress host not a name", []string{"--egress-close-host=api.stripe.com;id"}, "is not a lowercase DNS name"},
		{"egress host an address", []string{"--egress-close-host=198.51.100.7"}, "is an address: give it as egress-close-cidr"},
		{"egress host a base URL host", []string{"--egress-close-host=stripe.egress.local"}, "is a base URL host"},
		{"egress CIDR not a CIDR", []string{"--egress-close-cidr=203.0.113.0"}, "is not a CIDR"},
		{"egress CIDR with host bits", []string{"--egress-close-cidr=203.0.113.9/24"}, "did you mean 203.0.113.0/24?"},
		{"egress CIDR loopback", []string{"--egress-close-cidr=127.0.0.0/8"}, "is loopback"},
	}
	for _, tc := range egressCases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(append([]string{}, goodInjectArgs...), goodEgressArgs...), tc.args...)
			_, err := injectConfig(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
	// Nothing to close: neither a host nor a CIDR.
	if _, err := injectConfig(t, append(append([]string{}, goodInjectArgs...), "--close-egress", "--egress-image=registry.example/iptables:1.8.11", "--egress-agent-uid=1000")...); err == nil ||
		!strings.Contains(err.Error(), "at least one egress-close-host or egress-close-cidr") {
		t.Fatalf("close-egress with nothing to close: %v", err)
	}
	// Environment variables, as for every flag (lists comma-separated).
	env := map[string]string{"COUNTERSIGN_CLOSE_EGRESS": "true", "COUNTERSIGN_EGRESS_IMAGE": "registry.example/iptables:1.8.11",
		"COUNTERSIGN_EGRESS_AGENT_UID": "1000", "COUNTERSIGN_EGRESS_CLOSE_CIDR": "203.0.113.0/24,2001:db8::/32"}
	f := defaultInjectFlags()
	fs := pflag.NewFlagSet("inject", pflag.ContinueOnError)
	f.bind(fs)
	if err := fs.Parse(goodInjectArgs); err != nil {
		t.Fatal(err)
	}
	if err := config.Resolve(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if fromEnv, err := f.config(); err != nil || !fromEnv.Egress.Enabled || fromEnv.Egress.AgentUID != 1000 || len(fromEnv.Egress.CIDRs) != 2 {
		t.Fatalf("egress from the environment: %+v, %v", fromEnv.Egress, err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, goodInjectArgs...), tc.args...)
			_, err := injectConfig(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestServeInjectOverTLS: the webhook answers a review over HTTPS with the
// certificate it was given, serves a renewed certificate without a
// restart, and stops when its context ends.
func TestServeInjectOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeCert(t, certFile, keyFile, 1)
	cfg, err := injectConfig(t, append(goodInjectArgs, "--tls-cert-file="+certFile, "--tls-key-file="+keyFile)...)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := inject.LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- ServeInject(ctx, lis, pair.GetCertificate, cfg, logging.New(os.Stderr, "text", "error"))
	}()

	review, err := os.ReadFile("../inject/testdata/ns-basic.in.json")
	if err != nil {
		t.Fatal(err)
	}
	post := func(pool *x509.CertPool) (*http.Response, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
		defer c.CloseIdleConnections()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://"+lis.Addr().String()+inject.PathNamespace, bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		return c.Do(req)
	}
	resp, err := post(first)
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) == 0 {
		t.Fatalf("status %d, response %+v", resp.StatusCode, out.Response)
	}

	// A renewed certificate (another key, so the old CA no longer verifies it).
	second := writeCert(t, certFile, keyFile, 2)
	later := time.Now().Add(time.Hour)
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if resp, err := post(first); err == nil {
		resp.Body.Close()
		t.Fatal("the old certificate is still served")
	}
	resp, err = post(second)
	if err != nil {
		t.Fatalf("the renewed certificate is not served: %v", err)
	}
	resp.Body.Close()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeInject: %v", err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and returns a
// pool that trusts it.
func writeCert(t *testing.T, certFile, keyFile string, serial int64) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "countersign-injector"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// goodDatabaseSecret is the database-secret goodInjectArgs name.
func goodDatabaseSecret(t *testing.T) string {
	t.Helper()
	for _, a := range goodInjectArgs {
		if v, ok := strings.CutPrefix(a, "--database-secret="); ok {
			return v
		}
	}
	t.Fatal("goodInjectArgs names no database-secret")
	return ""
}
