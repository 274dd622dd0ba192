//go:build k8s

package k8s

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/countersign/countersign/internal/inject"
)

const egressUID = 10001

// TestInjectWithClosedEgressAgainstAPIServer: with --close-egress, a pod
// that runs as the agents' UID is stored with the egress init container
// first and still guarded, although the API server fills in its defaults
// and, when the in-tree admission plugins run again after the patch, a
// LimitRange's default CPU limit (the injector's second look at the pod
// must not take those for a forgery); a pod of the image's user is refused
// with the injector's reason.
func TestInjectWithClosedEgressAgainstAPIServer(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := startCluster(t, ctx, dir)
	kc, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		t.Fatal(err)
	}

	cfg := injectorConfig()
	cfg.Egress = inject.EgressConfig{Enabled: true, Image: "registry.example/iptables:1.8.11", AgentUID: egressUID,
		Hosts: []string{"api.stripe.com"}, CIDRs: []string{"203.0.113.0/24", "2001:db8::/32"}}
	bin := buildCountersign(t, dir)
	certFile, keyFile, _, _ := c.pki.issue(t, "injector", pkix.Name{CommonName: "countersign-injector"}, true)
	port := freePort(t)
	injector := start(t, dir, "countersign-inject", bin, "inject",
		fmt.Sprintf("--listen-addr=127.0.0.1:%d", port),
		"--tls-cert-file="+certFile, "--tls-key-file="+keyFile,
		"--namespace="+cfg.Namespace,
		"--countersign-image="+cfg.CountersignImage, "--envoy-image="+cfg.EnvoyImage,
		"--envoy-configmap="+cfg.EnvoyConfigMap, "--rails-configmap="+cfg.RailsConfigMap,
		"--database-secret="+cfg.DatabaseSecret,
		"--rail-key=stripe_main=countersign-stripe-main/key",
		"--base-url="+baseURLName+"="+baseURL,
		"--close-egress", "--egress-image="+cfg.Egress.Image, "--egress-agent-uid="+strconv.Itoa(egressUID),
		"--egress-close-host=api.stripe.com", "--egress-close-cidr=203.0.113.0/24,2001:db8::/32",
	)
	defer injector.stop(t)
	injectorURL := fmt.Sprintf("https://127.0.0.1:%d", port)
	pool := x509.NewCertPool()
	pool.AddCert(c.pki.caCert)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}}}
	waitFor(t, "countersign inject /healthz over TLS", 30*time.Second, injector, func() error {
		return getOK(ctx, hc, injectorURL+"/healthz", "ok")
	})

	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: injectorNamespace}},
		{ObjectMeta: metav1.ObjectMeta{Name: agentsNamespace, Labels: map[string]string{inject.InjectKey: "enabled"}}},
	} {
		createNamespace(t, ctx, kc, ns)
	}
	defaultCPU := resource.MustParse("250m")
	limits := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceCPU: defaultCPU},
	}}}}
	if _, err := kc.CoreV1().LimitRanges(agentsNamespace).Create(ctx, limits, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create LimitRange: %v", err)
	}
	registerWebhook(t, ctx, kc, injectorURL, c.pki.caPEM)
	waitUntilInjected(t, ctx, kc, c, "the API server calls the webhook", hardenedPod("probe"))

	t.Run("a pod of the agents' UID is stored with egress closed first", func(t *testing.T) {
		if _, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, hardenedPod("agent"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		stored, err := kc.CoreV1().Pods(agentsNamespace).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if err := inject.Guarded(stored, cfg); err != nil {
			t.Errorf("the stored pod is not guarded: %v", err)
		}
		if got := names(stored.Spec.InitContainers); !slices.Equal(got, []string{inject.EgressContainer, inject.CountersignContainer, inject.EnvoyContainer}) {
			t.Fatalf("init containers %v, want the egress container, then the two sidecars", got)
		}
		egress := stored.Spec.InitContainers[0]
		if egress.RestartPolicy != nil {
			t.Errorf("the egress container is restartable: %v", *egress.RestartPolicy)
		}
		// The in-tree plugins ran again after the patch, and the injector
		// looked again at what they made of it.
		if got := egress.Resources.Limits[corev1.ResourceCPU]; got.Cmp(defaultCPU) != 0 {
			t.Errorf("the egress container's CPU limit is %v: the LimitRange's default was not applied after the patch, so this did not test a second look", got.String())
		}
		t.Logf("stored %s/%s: initContainers %v, %s with capabilities %v as UID %d, CPU limit %s from the LimitRange",
			stored.Namespace, stored.Name, names(stored.Spec.InitContainers), egress.Name, egress.SecurityContext.Capabilities.Add,
			*egress.SecurityContext.RunAsUser, egress.Resources.Limits.Cpu())
	})

	t.Run("a pod of the image's user is refused with the injector's reason", func(t *testing.T) {
		pod := hardenedPod("image-user")
		pod.Spec.SecurityContext = nil
		_, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			t.Fatal("a pod that may run as its image's user was admitted with egress closed")
		}
		if want := "spec.containers[0] (agent) sets no runAsUser, nor does the pod"; !strings.Contains(err.Error(), want) || !apierrors.IsForbidden(err) {
			t.Errorf("refusal %v is not a 403 saying %q", err, want)
		}
		mustNotExist(t, ctx, kc, agentsNamespace, pod.Name)
	})
}

// hardenedPod is an agent pod closed egress admits: the agents' UID,
// non-root, no escalation.
func hardenedPod(name string) *corev1.Pod {
	pod := agentPod(name)
	uid, nonRoot, escalate := int64(egressUID), true, false
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: &nonRoot}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &escalate}
	return pod
}
