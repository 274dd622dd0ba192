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
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/countersign/countersign/internal/inject"
)

const (
	injectorNamespace = "countersign-system"
	agentsNamespace   = "agents" // labelled: every pod there is guarded
	otherNamespace    = "elsewhere"
	baseURLName       = "STRIPE_API_BASE"
	baseURL           = "http://stripe.egress.local:15001"
	namespaceWebhook  = "namespace.inject.countersign.io"
	podWebhook        = "pod.inject.countersign.io"
)

// injectorConfig is what the injector is started with below, as
// inject.Config, so the stored pods can be checked with inject.Guarded.
func injectorConfig() inject.Config {
	return inject.Config{
		Namespace:        injectorNamespace,
		CountersignImage: "registry.example/countersign:v0.1.0",
		EnvoyImage:       "envoyproxy/envoy:distroless-v1.40.2",
		PullPolicy:       corev1.PullIfNotPresent,
		EnvoyConfigMap:   "countersign-envoy-sidecar", EnvoyConfigKey: "envoy.yaml",
		RailsConfigMap: "countersign-rails", RailsConfigKey: "rails.yaml",
		DatabaseSecret: "countersign-database", DatabaseKey: "url",
		RailKeys: []inject.RailKey{{Account: "stripe_main", Secret: "countersign-stripe-main", Key: "key"}},
		BaseURLs: []inject.EnvVar{{Name: baseURLName, Value: baseURL}},
		HTTPPort: 15080,
	}
}

// TestInjectAgainstAPIServer registers `countersign inject` (the real
// binary) with a real kube-apiserver on a real etcd, as docs/injection.md
// tells an operator to, and checks what the API server stores: an opted-in
// pod is stored guarded, a pod that would undo the isolation is refused
// with the injector's reason, and with the injector down an opted-in pod
// is not admitted at all (failurePolicy: Fail).
func TestInjectAgainstAPIServer(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	c := startCluster(t, ctx, dir)
	kc, err := kubernetes.NewForConfig(c.admin)
	if err != nil {
		t.Fatal(err)
	}

	// The injector, on a loopback port, with a certificate for 127.0.0.1
	// from the test CA (the caBundle below).
	cfg := injectorConfig()
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
	)
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
		{ObjectMeta: metav1.ObjectMeta{Name: otherNamespace}},
	} {
		createNamespace(t, ctx, kc, ns)
	}
	registerWebhook(t, ctx, kc, injectorURL, c.pki.caPEM)

	waitUntilInjected(t, ctx, kc, c, "the API server calls the webhook", agentPod("probe"))

	t.Run("a pod in the labelled namespace is stored guarded", func(t *testing.T) {
		created, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, agentPod("agent"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		stored, err := kc.CoreV1().Pods(agentsNamespace).Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		checkGuarded(t, stored, cfg)
	})

	t.Run("a pod that opts itself in elsewhere is stored guarded", func(t *testing.T) {
		pod := agentPod("opted-in")
		pod.Labels = map[string]string{inject.InjectKey: "true"}
		if _, err := kc.CoreV1().Pods(otherNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		stored, err := kc.CoreV1().Pods(otherNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		checkGuarded(t, stored, cfg)
	})

	t.Run("a pod not opted in elsewhere is stored as it was", func(t *testing.T) {
		if _, err := kc.CoreV1().Pods(otherNamespace).Create(ctx, agentPod("plain"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		stored, err := kc.CoreV1().Pods(otherNamespace).Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if len(stored.Spec.InitContainers) != 0 || stored.Annotations[inject.StatusKey] != "" {
			t.Errorf("a pod that did not opt in was changed: init containers %v, annotations %v", names(stored.Spec.InitContainers), stored.Annotations)
		}
	})

	// Every pod that would undo the isolation, refused by the API server
	// with the injector's reason, nothing stored.
	for _, tc := range []struct {
		name, reason string
		edit         func(*corev1.Pod)
	}{
		{"host-network", "spec.hostNetwork is true", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{"shared-pid", "shareProcessNamespace", func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptrTo(true) }},
		{"privileged", "privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptrTo(true)}
		}},
		{"mounts-socket", inject.SocketVolume, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: inject.SocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: inject.SocketVolume, MountPath: inject.SocketDir}}
		}},
	} {
		t.Run("a "+tc.name+" pod in the labelled namespace is refused with the injector's reason", func(t *testing.T) {
			pod := agentPod(tc.name)
			tc.edit(pod)
			_, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, pod, metav1.CreateOptions{})
			if err == nil {
				t.Fatalf("a %s pod was admitted into a labelled namespace", tc.name)
			}
			msg := err.Error()
			for _, want := range []string{`admission webhook "` + namespaceWebhook + `" denied the request`, tc.reason} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not say %q", msg, want)
				}
			}
			t.Logf("refused: %v", err)
			if !apierrors.IsForbidden(err) {
				t.Errorf("refusal is not 403 Forbidden: %v", err)
			}
			mustNotExist(t, ctx, kc, agentsNamespace, pod.Name)
		})
	}

	t.Run("with the injector down an opted-in pod is not admitted", func(t *testing.T) {
		injector.stop(t)
		if injector.err != nil {
			t.Errorf("countersign inject did not exit cleanly on SIGTERM: %v", injector.err)
		}
		if err := getOK(ctx, hc, injectorURL+"/healthz", "ok"); err == nil {
			t.Fatal("the injector still answers after it was stopped")
		}
		pod := agentPod("unguarded")
		_, err := kc.CoreV1().Pods(agentsNamespace).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			t.Fatal("an opted-in pod was admitted while the injector was down (failurePolicy must be Fail)")
		}
		if want := `failed calling webhook "` + namespaceWebhook + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
		t.Logf("refused while the injector is down: %v", err)
		mustNotExist(t, ctx, kc, agentsNamespace, pod.Name)
	})
}

// registerWebhook creates the MutatingWebhookConfiguration of
// docs/injection.md, with URLs for the injector on loopback instead of a
// Service.
func registerWebhook(t *testing.T, ctx context.Context, kc kubernetes.Interface, injectorURL string, caBundle []byte) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	timeout := int32(10)
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	entry := func(name, path string, sel *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
		url := injectorURL + path
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules:                   rules,
			NamespaceSelector:       sel,
			FailurePolicy:           &fail,
			SideEffects:             &none,
			ReinvocationPolicy:      &ifNeeded,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	whc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "countersign-injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			entry(namespaceWebhook, inject.PathNamespace, &metav1.LabelSelector{MatchLabels: map[string]string{inject.InjectKey: "enabled"}}),
			entry(podWebhook, inject.PathPod, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: inject.InjectKey, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"enabled"}},
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", injectorNamespace}},
			}}),
		},
	}
	if _, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, whc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create MutatingWebhookConfiguration: %v", err)
	}
}

// agentPod is an ordinary agent pod: one container, nothing of ours, not
// root (the injector refuses an agent that could rewrite the pod's
// /etc/hosts).
func agentPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true)},
			Containers: []corev1.Container{{
				Name:  "agent",
				Image: "registry.example/agent:v1",
				Env:   []corev1.EnvVar{{Name: "AGENT_MODE", Value: "test"}},
				// Every agent container must say it does not escalate
				// (inject's agentRefusals).
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false)},
			}},
		},
	}
}

// checkGuarded checks the pod the API server stored: the injector's own
// invariants (inject.Guarded), and, spelled out, what the issue asks to
// see — the sidecars present, the socket volume on them only, the base
// URL on the agent.
func checkGuarded(t *testing.T, pod *corev1.Pod, cfg inject.Config) {
	t.Helper()
	if err := inject.Guarded(pod, cfg); err != nil {
		t.Errorf("the stored pod is not guarded: %v", err)
	}
	if got := pod.Annotations[inject.StatusKey]; got != inject.StatusInjected {
		t.Errorf("annotation %s = %q, want %q", inject.StatusKey, got, inject.StatusInjected)
	}
	init := names(pod.Spec.InitContainers)
	if !slices.Equal(init, []string{inject.CountersignContainer, inject.EnvoyContainer}) {
		t.Errorf("init containers %v, want the two sidecars in order", init)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("%s is not a native sidecar (restartPolicy %v)", c.Name, c.RestartPolicy)
		}
		if !mounts(c, inject.SocketVolume) {
			t.Errorf("sidecar %s does not mount %s", c.Name, inject.SocketVolume)
		}
	}
	if i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == inject.SocketVolume }); i < 0 || pod.Spec.Volumes[i].EmptyDir == nil {
		t.Errorf("no emptyDir volume %s in %v", inject.SocketVolume, pod.Spec.Volumes)
	}
	if got := names(pod.Spec.Containers); !slices.Equal(got, []string{"agent"}) {
		t.Fatalf("containers %v, want the agent alone", got)
	}
	agent := pod.Spec.Containers[0]
	if mounts(agent, inject.SocketVolume) {
		t.Errorf("the agent mounts %s", inject.SocketVolume)
	}
	env := map[string]string{}
	for _, e := range agent.Env {
		env[e.Name] = e.Value
	}
	if env[baseURLName] != baseURL || env["AGENT_MODE"] != "test" {
		t.Errorf("agent env %v, want %s=%s beside its own AGENT_MODE", agent.Env, baseURLName, baseURL)
	}
	var socketUsers []string
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if mounts(c, inject.SocketVolume) {
			socketUsers = append(socketUsers, c.Name)
		}
	}
	t.Logf("stored %s/%s: initContainers %v (restartPolicy Always), containers %v, %s mounted by %v, agent %s=%s",
		pod.Namespace, pod.Name, init, names(pod.Spec.Containers), inject.SocketVolume, socketUsers, baseURLName, env[baseURLName])
	aliased := slices.ContainsFunc(pod.Spec.HostAliases, func(h corev1.HostAlias) bool {
		return h.IP == "127.0.0.1" && slices.Contains(h.Hostnames, "stripe.egress.local")
	})
	if !aliased {
		t.Errorf("hostAliases %v do not send stripe.egress.local to 127.0.0.1", pod.Spec.HostAliases)
	}
}

func mounts(c corev1.Container, volume string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
}

func names(cs []corev1.Container) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func mustNotExist(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, name string) {
	t.Helper()
	_, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("pod %s/%s: want NotFound, got %v", ns, name, err)
	}
}
