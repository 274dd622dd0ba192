//go:build k8s

package k8s

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/countersign/countersign/internal/inject"
	"github.com/countersign/countersign/internal/logging"
	"github.com/countersign/countersign/internal/webhookcert"
)

// TestSelfTLSAgainstAPIServer: the injector's own certificate
// (--tls-mode=self, internal/webhookcert) under a real API server and its
// RBAC authorizer. A service account holding exactly the chart's RBAC
// (templates/injector-rbac.yaml; scripts/chartcheck holds the chart to
// these rules) creates the Secret, writes the CA into a webhook
// configuration that has no caBundle, and the API server, trusting only
// that, calls the webhook and stores the pod guarded. Two managers racing
// share one Secret; the token cannot read any other Secret or patch any
// other webhook configuration.
func TestSelfTLSAgainstAPIServer(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, dir)
	kc, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		t.Fatal(err)
	}
	const (
		sa       = "countersign-injector"
		secret   = "countersign-injector-tls"
		hookName = "countersign-injector"
	)
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: injectorNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: agentsNamespace, Labels: map[string]string{inject.InjectKey: "enabled"}}},
	} {
		createNamespace(t, ctx, kc, ns)
	}
	// Someone else's Secret beside ours, which the token must not read.
	if _, err := kc.CoreV1().Secrets(injectorNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ledger"},
		StringData: map[string]string{"url": "postgres://secret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ServiceAccounts(injectorNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: injectorNamespace}}
	if _, err := kc.RbacV1().Roles(injectorNamespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa + "-certificate"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get", "update"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().RoleBindings(injectorNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa + "-certificate"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa + "-certificate"}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa + "-ca-bundle"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
			ResourceNames: []string{hookName}, Verbs: []string{"get", "patch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa + "-ca-bundle"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa + "-ca-bundle"}, Subjects: subject}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := kc.CoreV1().ServiceAccounts(injectorNamespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	tokenFile := filepath.Join(dir, "sa-token")
	writeFile(t, tokenFile, []byte(tok.Status.Token))

	// The injector on loopback, called by URL as https://localhost:<port>,
	// so its leaf is for "localhost"; the webhook configuration starts
	// with no caBundle at all.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	registerWebhook(t, ctx, kc, fmt.Sprintf("https://localhost:%d", port), nil)

	log := logging.New(os.Stderr, "text", "warn")
	manager := func() *webhookcert.Manager {
		kube, err := webhookcert.NewClient(c.admin.Host, c.pki.caPEM, tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		return &webhookcert.Manager{Kube: kube, Namespace: injectorNamespace, SecretName: secret, WebhookConfig: hookName,
			DNSNames: []string{"localhost"}, Policy: webhookcert.DefaultPolicy, Log: log}
	}
	a, b := manager(), manager()
	errs := make(chan error, 2)
	go func() { errs <- a.Sync(ctx) }()
	go func() { errs <- b.Sync(ctx) }()
	if err := errors.Join(<-errs, <-errs); err != nil {
		t.Fatalf("two replicas' first sync under the chart's RBAC: %v", err)
	}
	ca, cb := mustCert(t, a), mustCert(t, b)
	if string(ca.Certificate[0]) != string(cb.Certificate[0]) {
		t.Fatal("two replicas serve different leaves")
	}
	stored, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, hookName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range stored.Webhooks {
		if len(w.ClientConfig.CABundle) == 0 {
			t.Fatalf("webhook %s has no caBundle after the sync", w.Name)
		}
	}
	t.Logf("two replicas share one leaf; caBundle written into %d webhooks (%d bytes)", len(stored.Webhooks), len(stored.Webhooks[0].ClientConfig.CABundle))

	srv := &http.Server{Handler: inject.NewMux(injectorConfig(), log), ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: a.GetCertificate}}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	waitUntilInjected(t, ctx, kc, c, "the API server calls the webhook, trusting the caBundle the injector wrote", agentPod("probe"))
	created, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, agentPod("agent"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	checkGuarded(t, created, injectorConfig())

	// What the token cannot do.
	kube, err := webhookcert.NewClient(c.admin.Host, c.pki.caPEM, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.GetSecret(ctx, injectorNamespace, "ledger"); err == nil {
		t.Error("the injector's token read another Secret")
	} else {
		t.Logf("another Secret: %v", err)
	}
	if err := kube.PatchWebhookConfig(ctx, "someone-else", []byte(`[]`)); err == nil {
		t.Error("the injector's token patched another webhook configuration")
	}
	if _, err := kube.GetSecret(ctx, agentsNamespace, secret); err == nil {
		t.Error("the injector's token read a Secret in an agent namespace")
	}
}

func mustCert(t *testing.T, m *webhookcert.Manager) *tls.Certificate {
	t.Helper()
	c, err := m.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptrTo[T any](v T) *T { return &v }
