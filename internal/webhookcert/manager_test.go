package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/testing/testclock"
)

var testNames = ServiceNames("countersign-injector", testNamespace)

// testPolicy is DefaultPolicy; the clock is what moves.
var testPolicy = DefaultPolicy

func newManager(t *testing.T, f *fakeAPI, clk *testclock.Clock) *Manager {
	c, _ := f.client(t)
	return &Manager{Kube: c, Namespace: testNamespace, SecretName: testSecret, WebhookConfig: testWebhook,
		DNSNames: testNames, Policy: testPolicy, Now: clk.Now}
}

// bundlePool is what the API server trusts for webhook i.
func bundlePool(t *testing.T, cfg admissionregistrationv1.MutatingWebhookConfiguration, i int) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.Webhooks[i].ClientConfig.CABundle) {
		t.Fatalf("webhook %s has no CA bundle", cfg.Webhooks[i].Name)
	}
	return pool
}

// trusted: the leaf m serves verifies, at now, against every webhook's
// caBundle for the Service name the API server calls.
func trusted(t *testing.T, f *fakeAPI, m *Manager, now time.Time) error {
	t.Helper()
	cert, err := m.GetCertificate(nil)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return err
	}
	cfg := f.webhookConfig()
	for i := range cfg.Webhooks {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: bundlePool(t, cfg, i), DNSName: testNames[0], CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return err
		}
	}
	return nil
}

func serial(t *testing.T, m *Manager) string {
	t.Helper()
	cert, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	return leaf.SerialNumber.String()
}

// Two replicas starting at once on an empty cluster end with one CA and one
// leaf between them, trusted by both webhooks, over a real TLS handshake.
func TestReplicasShareOneCertificate(t *testing.T) {
	f := newFakeAPI(t)
	clk := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	a, b := newManager(t, f, clk), newManager(t, f, clk)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		m := a
		if i%2 == 1 {
			m = b
		}
		wg.Go(func() { errs[i] = m.Sync(context.Background()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if sa, sb := serial(t, a), serial(t, b); sa != sb {
		t.Fatalf("replicas serve different leaves: %s and %s", sa, sb)
	}
	if n := len(pemBlocks(f.secretData()[KeyCABundle], "CERTIFICATE")); n != 1 {
		t.Fatalf("the Secret holds %d CAs, want 1", n)
	}
	for _, m := range []*Manager{a, b} {
		if err := trusted(t, f, m, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}

	// The real thing: a TLS server on a's GetCertificate, a client trusting
	// only the first webhook's caBundle, calling the Service name.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = tls.Server(c, &tls.Config{GetCertificate: a.GetCertificate}).Handshake()
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: bundlePool(t, f.webhookConfig(), 0), ServerName: testNames[0]})
	if err != nil {
		t.Fatalf("the API server's handshake with the webhook: %v", err)
	}
	conn.Close()

	// A second round changes nothing: no write, no patch.
	p0, u0 := f.counts()
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p1, u1 := f.counts(); p1 != p0 || u1 != u0 {
		t.Fatalf("an idle sync wrote: patches %d→%d, updates %d→%d", p0, p1, u0, u1)
	}
}

// Until the first sync succeeds there is nothing to serve, and a sync that
// fails keeps the last good leaf in service.
func TestFailsClosedWithoutTheAPIServer(t *testing.T) {
	f := newFakeAPI(t)
	clk := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	m := newManager(t, f, clk)
	f.mu.Lock()
	f.down = true
	f.mu.Unlock()
	if err := m.Sync(context.Background()); err == nil {
		t.Fatal("sync succeeded with the API server down")
	}
	if _, err := m.GetCertificate(nil); err == nil {
		t.Fatal("a certificate is served before any sync succeeded")
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := serial(t, m)
	f.mu.Lock()
	f.down = true
	f.mu.Unlock()
	clk.Advance(testPolicy.LeafValidity - testPolicy.LeafRenewBefore + time.Hour)
	if err := m.Sync(context.Background()); err == nil {
		t.Fatal("sync succeeded with the API server down")
	}
	if after := serial(t, m); after != before {
		t.Fatalf("a failed sync changed the served leaf: %s → %s", before, after)
	}
}

// A leaf is renewed before it expires, by the same CA: the bundle does not
// change, so the API server needs no patch.
func TestLeafRenewedUnderTheSameCA(t *testing.T) {
	f := newFakeAPI(t)
	clk := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	m := newManager(t, f, clk)
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := serial(t, m)
	bundle := string(f.secretData()[KeyCABundle])
	patches, _ := f.counts()

	clk.Advance(testPolicy.LeafValidity - testPolicy.LeafRenewBefore - time.Hour)
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if serial(t, m) != first {
		t.Fatal("the leaf was renewed before its renewal time")
	}
	clk.Advance(2 * time.Hour)
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if serial(t, m) == first {
		t.Fatal("the leaf was not renewed inside its renewal margin")
	}
	if got := string(f.secretData()[KeyCABundle]); got != bundle {
		t.Fatal("renewing the leaf changed the CA bundle")
	}
	if p, _ := f.counts(); p != patches {
		t.Fatalf("renewing the leaf patched the webhook configuration (%d → %d)", patches, p)
	}
	if err := trusted(t, f, m, clk.Now()); err != nil {
		t.Fatal(err)
	}
}

// The CA is replaced with an overlap: the new one is published two leaf
// lifetimes before the old one expires and signs only once the old one has
// less than one left; the old one leaves the bundle when it expires.
func TestCARotatesWithOverlap(t *testing.T) {
	f := newFakeAPI(t)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := testclock.New(start)
	m := newManager(t, f, clk)
	sync := func() material {
		t.Helper()
		if err := m.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := trusted(t, f, m, clk.Now()); err != nil {
			t.Fatal(err)
		}
		return parse(f.secretData(), clk.Now())
	}
	mat := sync()
	oldCA := mat.cas[0].cert
	issuer := func() string {
		cert, _ := m.GetCertificate(nil)
		leaf, _ := x509.ParseCertificate(cert.Certificate[0])
		return string(leaf.AuthorityKeyId)
	}

	clk.Set(oldCA.NotAfter.Add(-2*testPolicy.LeafValidity + time.Hour))
	mat = sync()
	if len(mat.cas) != 2 {
		t.Fatalf("two leaf lifetimes before the CA expires the bundle holds %d CAs, want 2", len(mat.cas))
	}
	if issuer() != string(oldCA.SubjectKeyId) {
		t.Fatal("a leaf is signed by the new CA as soon as it is published")
	}
	newCA := mat.cas[1].cert

	clk.Set(oldCA.NotAfter.Add(-testPolicy.LeafValidity + time.Hour))
	mat = sync()
	if issuer() != string(newCA.SubjectKeyId) {
		t.Fatal("with less than a leaf lifetime left on the old CA, the leaf is not the new CA's")
	}
	if len(mat.cas) != 2 {
		t.Fatalf("the old CA left the bundle before it expired (%d CAs)", len(mat.cas))
	}

	clk.Set(oldCA.NotAfter.Add(time.Hour))
	mat = sync()
	if len(mat.cas) != 1 || !mat.cas[0].cert.Equal(newCA) {
		t.Fatalf("after the old CA expired the bundle holds %d CAs", len(mat.cas))
	}
}

// Whatever the clock does and whichever replica syncs, a replica that has
// synced serves a leaf the webhooks trust, and a replica that has not synced
// since keeps serving a leaf the webhooks still trust until it expires: a
// rotation by one replica never cuts off another's certificate.
func TestRotationNeverCutsOffAReplica(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFakeAPI(t)
		clk := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		// A CA of four leaf lifetimes, so a run sees it replaced.
		short := Policy{CAValidity: 4 * testPolicy.LeafValidity, LeafValidity: testPolicy.LeafValidity, LeafRenewBefore: testPolicy.LeafRenewBefore}
		ms := []*Manager{newManager(t, f, clk), newManager(t, f, clk), newManager(t, f, clk)}
		for _, m := range ms {
			m.Policy = short
			if err := m.Sync(context.Background()); err != nil {
				rt.Fatal(err)
			}
		}
		// rapid favours small draws: at least five days a step, so every run
		// crosses at least one CA replacement (a CA lives 360 days).
		steps := rapid.IntRange(80, 120).Draw(rt, "steps")
		for range steps {
			clk.Advance(5*24*time.Hour + time.Duration(rapid.Int64Range(0, int64(10*24*time.Hour)).Draw(rt, "jump")))
			i := rapid.IntRange(0, len(ms)-1).Draw(rt, "replica")
			if err := ms[i].Sync(context.Background()); err != nil {
				rt.Fatal(err)
			}
			if err := trusted(t, f, ms[i], clk.Now()); err != nil {
				rt.Fatalf("the replica that synced serves an untrusted leaf: %v", err)
			}
			for j, m := range ms {
				cert, _ := m.GetCertificate(nil)
				leaf, _ := x509.ParseCertificate(cert.Certificate[0])
				if !clk.Now().Before(leaf.NotAfter) {
					continue // expired: it should have synced; not this property
				}
				if err := trusted(t, f, m, clk.Now()); err != nil {
					rt.Fatalf("replica %d's unexpired leaf is no longer trusted after replica %d synced: %v", j, i, err)
				}
			}
			if n := len(pemBlocks(f.secretData()[KeyCABundle], "CERTIFICATE")); n > 2 {
				rt.Fatalf("the bundle grew to %d CAs", n)
			}
		}
	})
}

// A Secret that holds junk (or a CA whose key does not match) is replaced
// with good material, not served.
func TestJunkSecretIsReplaced(t *testing.T) {
	f := newFakeAPI(t)
	clk := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	other, err := newAuthority(clk.Now(), testPolicy.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := newAuthority(clk.Now(), testPolicy.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	mismatched := material{cas: []authority{{cert: mine.cert, key: other.key}}}
	data, err := mismatched.data()
	if err != nil {
		t.Fatal(err)
	}
	data[KeyLeaf], data[KeyLeafKey] = []byte("not a certificate"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	f.setSecretData(data)
	m := newManager(t, f, clk)
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	mat := parse(f.secretData(), clk.Now())
	if len(mat.cas) != 1 || mat.cas[0].cert.Equal(mine.cert) {
		t.Fatal("a CA whose key does not match it was kept")
	}
	if err := trusted(t, f, m, clk.Now()); err != nil {
		t.Fatal(err)
	}
}

// A webhook configuration reordered between the read and the patch fails
// the patch's name test (422) and is read again, not patched blindly.
func TestPatchReadsAgainWhenWebhooksMove(t *testing.T) {
	f := newFakeAPI(t)
	clk := testclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	f.beforePatch = func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
		cfg.Webhooks = append([]admissionregistrationv1.MutatingWebhook{{Name: "someone-else.example.com"}}, cfg.Webhooks...)
	}
	m := newManager(t, f, clk)
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := f.webhookConfig()
	if len(cfg.Webhooks) != 3 {
		t.Fatalf("%d webhooks", len(cfg.Webhooks))
	}
	if err := trusted(t, f, m, clk.Now()); err != nil {
		t.Fatal(err)
	}
}

// The token is read again for every call (the kubelet rotates it), and the
// API server's certificate must be the service account CA's.
func TestClientReadsTheTokenEveryCallAndPinsTheCA(t *testing.T) {
	f := newFakeAPI(t)
	c, tokenFile := f.client(t)
	if _, err := c.GetWebhookConfig(context.Background(), testWebhook); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.token = "token-2"
	f.mu.Unlock()
	if _, err := c.GetWebhookConfig(context.Background(), testWebhook); err == nil {
		t.Fatal("a stale token was accepted")
	}
	if err := os.WriteFile(tokenFile, []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWebhookConfig(context.Background(), testWebhook); err != nil {
		t.Fatalf("the rotated token was not read: %v", err)
	}
	if _, err := c.GetSecret(context.Background(), testNamespace, testSecret); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing Secret: %v, want ErrNotFound", err)
	}
	stranger, err := newAuthority(time.Now(), testPolicy.CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewClient(f.srv.URL, pemCert(stranger.cert.Raw), tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetWebhookConfig(context.Background(), testWebhook); err == nil {
		t.Fatal("an API server certificate outside the service account CA was accepted")
	}
	for _, bad := range []string{"http://10.0.0.1:443", "https://", "::"} {
		if _, err := NewClient(bad, pemCert(stranger.cert.Raw), tokenFile); err == nil {
			t.Errorf("NewClient(%q) accepted", bad)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{
		{CAValidity: 1000 * time.Hour, LeafValidity: 500 * time.Hour, LeafRenewBefore: time.Hour},
		{CAValidity: 10000 * time.Hour, LeafValidity: 500 * time.Hour, LeafRenewBefore: 500 * time.Hour},
		{CAValidity: 10000 * time.Hour, LeafValidity: time.Minute, LeafRenewBefore: time.Second},
	} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
