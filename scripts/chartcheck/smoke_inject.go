package main

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
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/countersign/countersign/internal/inject"
)

// smokeInject starts the real `countersign inject` with the rendered
// container's arguments (the TLS files replaced by a throwaway certificate
// under a temporary root, the listen address by a free loopback port) and
// requires what the API server relies on: it accepts every rendered flag,
// answers the probes' GET /healthz over HTTPS, guards a pod of an opted-in
// namespace on /mutate/namespace with a patch that adds the sidecars from
// the rendered images and ConfigMap, admits a pod that did not opt in on
// /mutate/pod unchanged, and stops on SIGTERM.
func smokeInject(bin string, inj *injector) (string, error) {
	if inj == nil || inj.container == nil {
		return "", errors.New("no injector container")
	}
	root, err := os.MkdirTemp("", "chartcheck-inject-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(root) }()
	under := func(p string) string { return filepath.Join(root, filepath.Clean("/"+p)) }

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port, err := freePort(ctx)
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	certFile, keyFile := inj.certFile, inj.keyFile
	self := slices.Contains(inj.container.Args, "--tls-mode=self")
	if self {
		// --tls-mode=self needs an API server: first show inject accepts
		// every rendered flag and goes for its service account (the
		// configuration is validated before), then serve the rest of the
		// smoke with a throwaway certificate from files.
		if err := smokeSelfTLSFlags(ctx, bin, inj.container.Args, root); err != nil {
			return "", err
		}
		certFile, keyFile = "/tls/tls.crt", "/tls/tls.key"
	}
	certPEM, err := writeKeyPair(under(certFile), under(keyFile))
	if err != nil {
		return "", err
	}
	var args []string
	var countersignImage string
	for _, a := range inj.container.Args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "--listen-addr":
			a = "--listen-addr=" + addr
		case "--tls-cert-file", "--tls-key-file":
			a = k + "=" + under(v)
		case "--countersign-image":
			countersignImage = v
		case "--tls-mode", "--tls-secret", "--webhook-config", "--service", "--cert-sync-interval":
			continue
		}
		args = append(args, a)
	}
	if self {
		args = append(args, "--tls-cert-file="+under(certFile), "--tls-key-file="+under(keyFile))
	}

	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "TMPDIR=" + root}
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &logs, &logs
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
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("inject did not stop within 20s of SIGTERM (killed: %w)", <-exited)
		}
	}
	fail := func(format string, a ...any) (string, error) {
		_ = stop()
		return "", fmt.Errorf("%s\n--- inject's log:\n%s", fmt.Sprintf(format, a...), logs.String())
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}}
	base := "https://" + addr

	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			return "", fmt.Errorf("inject exited at start: %w\n--- inject's log:\n%s", err, logs.String())
		default:
		}
		if code, err := getTLS(ctx, client, base+"/healthz"); err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return fail("GET /healthz over HTTPS did not answer 200 within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// An agent pod of an opted-in namespace: guarded. With egress closed it
	// runs as the agents' UID and cannot leave it.
	uid, nonRoot, escalate := int64(1000), true, false
	if inj.egressUID != 0 {
		uid = inj.egressUID
	}
	agent := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "agents-smoke"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "agent", Image: "registry.example.com/agent:1.0",
			SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsNonRoot: &nonRoot, AllowPrivilegeEscalation: &escalate},
		}}},
	}
	want := []string{inject.CountersignContainer, inject.EnvoyContainer}
	if inj.egressUID != 0 {
		want = append([]string{inject.EgressContainer}, want...)
		// Another UID would leave the rules behind: refused.
		other := agent.DeepCopy()
		*other.Spec.Containers[0].SecurityContext.RunAsUser = uid + 1
		resp, err := review(ctx, client, base+inject.PathNamespace, other)
		if err != nil {
			return fail("POST %s: %v", inject.PathNamespace, err)
		}
		if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, fmt.Sprintf("the egress rules match the agent's UID %d only", uid)) {
			return fail("POST %s of a pod running as UID %d with egress closed for %d: want it refused, got allowed=%v result=%v", inject.PathNamespace, uid+1, uid, resp.Allowed, resp.Result)
		}
	}
	resp, err := review(ctx, client, base+inject.PathNamespace, agent)
	if err != nil {
		return fail("POST %s: %v", inject.PathNamespace, err)
	}
	if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch || len(resp.Patch) == 0 {
		return fail("POST %s: want an allowed review with a JSON patch, got allowed=%v result=%v", inject.PathNamespace, resp.Allowed, resp.Result)
	}
	guarded, err := applyPatch(agent, resp.Patch)
	if err != nil {
		return fail("the patch does not apply: %v", err)
	}
	names := []string{}
	for _, c := range guarded.Spec.InitContainers {
		names = append(names, c.Name)
		if c.Name == inject.CountersignContainer && c.Image != countersignImage {
			return fail("the injected countersign runs %q, not --countersign-image %q", c.Image, countersignImage)
		}
		if c.Name == inject.EgressContainer && c.Image != inj.egressImage {
			return fail("the injected egress container runs %q, not --egress-image %q", c.Image, inj.egressImage)
		}
	}
	if !slices.Equal(names, want) {
		return fail("the guarded pod's init containers are %q, want %q", names, want)
	}
	if !slices.ContainsFunc(guarded.Spec.Volumes, func(v corev1.Volume) bool {
		return v.ConfigMap != nil && v.ConfigMap.Name == inj.envoyConfigMap
	}) {
		return fail("the guarded pod mounts no ConfigMap %s (--envoy-configmap)", inj.envoyConfigMap)
	}

	// An UPDATE swapping the guarded pod's countersign image: refused.
	swapped := guarded.DeepCopy()
	for i := range swapped.Spec.InitContainers {
		if swapped.Spec.InitContainers[i].Name == inject.CountersignContainer {
			swapped.Spec.InitContainers[i].Image = "attacker.example/countersign:1"
		}
	}
	resp, err = reviewUpdate(ctx, client, base+inject.PathNamespace, guarded, swapped)
	if err != nil {
		return fail("POST %s (UPDATE): %v", inject.PathNamespace, err)
	}
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "would leave it unguarded") {
		return fail("POST %s of an UPDATE swapping the guarded pod's countersign image: want it refused, got allowed=%v result=%v", inject.PathNamespace, resp.Allowed, resp.Result)
	}

	// A pod that did not opt in, on the pod webhook: admitted unchanged.
	other := agent.DeepCopy()
	other.Namespace = "elsewhere"
	resp, err = review(ctx, client, base+inject.PathPod, other)
	if err != nil {
		return fail("POST %s: %v", inject.PathPod, err)
	}
	if !resp.Allowed || len(resp.Patch) != 0 {
		return fail("POST %s of a pod that did not opt in: want allowed without a patch, got allowed=%v, %d bytes of patch", inject.PathPod, resp.Allowed, len(resp.Patch))
	}
	if err := stop(); err != nil {
		return "", fmt.Errorf("after SIGTERM: %w\n--- inject's log:\n%s", err, logs.String())
	}
	egress := ""
	if inj.egressUID != 0 {
		egress = fmt.Sprintf(", its egress closed for UID %d first (a pod of another UID refused)", uid)
	}
	return "accepted every flag; /healthz 200 over HTTPS; an opted-in pod guarded by the rendered images and ConfigMap" + egress +
		", an UPDATE swapping its countersign image refused, a pod that did not opt in left alone; stopped on SIGTERM", nil
}

func review(ctx context.Context, client *http.Client, url string, pod *corev1.Pod) (*admissionv1.AdmissionResponse, error) {
	return reviewUpdate(ctx, client, url, nil, pod)
}

// reviewUpdate sends the review of a CREATE of pod (old nil) or of an
// UPDATE of old into pod.
func reviewUpdate(ctx context.Context, client *http.Client, url string, old, pod *corev1.Pod) (*admissionv1.AdmissionResponse, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	ar := &admissionv1.AdmissionRequest{
		UID:       types.UID("chartcheck-" + pod.Namespace),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: pod.Namespace,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
	if old != nil {
		if ar.OldObject.Raw, err = json.Marshal(old); err != nil {
			return nil, err
		}
		ar.Operation = admissionv1.Update
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  ar,
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, out)
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rv); err != nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w: %s", err, out)
	}
	if rv.Response == nil {
		return nil, fmt.Errorf("an AdmissionReview without a response: %s", out)
	}
	return rv.Response, nil
}

func getTLS(ctx context.Context, client *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func applyPatch(pod *corev1.Pod, patch []byte) (*corev1.Pod, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	out, err := p.Apply(doc)
	if err != nil {
		return nil, err
	}
	var guarded corev1.Pod
	return &guarded, json.Unmarshal(out, &guarded)
}

// writeKeyPair writes a throwaway self-signed certificate for localhost
// and 127.0.0.1 and returns its PEM.
func writeKeyPair(certFile, keyFile string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "chartcheck"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeFile(certFile, certPEM); err != nil {
		return nil, err
	}
	return certPEM, writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// smokeSelfTLSFlags runs inject with the rendered --tls-mode=self flags
// outside a cluster: it must get past the configuration's validation and
// stop where it reaches for the in-cluster service account.
func smokeSelfTLSFlags(ctx context.Context, bin string, args []string, root string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "TMPDIR=" + root}
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	const want = "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"
	if err == nil || !strings.Contains(string(out), want) {
		return fmt.Errorf("inject with the rendered --tls-mode=self flags outside a cluster: %w, want it to stop with %q:\n%s", err, want, out)
	}
	return nil
}
