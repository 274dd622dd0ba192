package inject

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzReview feeds the decoder any bytes: it must never panic, and
// whatever it accepts must be answered, a refusal with a reason and an
// admission with a patch only for a CREATE and only if the patched pod is
// guarded, with egress closed or not. An UPDATE admitted of a pod that was
// marked or carries a container or volume of the injector's keeps the
// injector's label and annotations and adds no ephemeral container.
func FuzzReview(f *testing.F) {
	ins, _ := filepath.Glob("testdata/*.in.json")
	for _, in := range ins {
		b, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// The same pod updated: a second container image, a debug container.
		if _, pod, err := Decode(b); err == nil && strings.HasPrefix(filepath.Base(in), "ns-basic") {
			changed := pod.DeepCopy()
			changed.Spec.Containers[0].Image = "registry.example/agent:2"
			f.Add(updateReview(f, pod, changed, ""))
			changed.Spec.EphemeralContainers = []corev1.EphemeralContainer{debugContainer("agent", SocketVolume)}
			f.Add(updateReview(f, pod, changed, SubresourceEphemeral))
			// The pod as injected: its label removed; its mark gone
			// (through pods/status) and a sidecar's image swapped.
			req, _, _ := Decode(b)
			resp := Mutate(req, pod, testConfig(), ScopeNamespace)
			p, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				f.Fatal(err)
			}
			raw, err := p.Apply(req.Object.Raw)
			if err != nil {
				f.Fatal(err)
			}
			var injected corev1.Pod
			if err := json.Unmarshal(raw, &injected); err != nil {
				f.Fatal(err)
			}
			changed = injected.DeepCopy()
			changed.Labels = map[string]string{InjectKey: "false"}
			f.Add(updateReview(f, &injected, changed, ""))
			delete(injected.Annotations, StatusKey)
			changed = injected.DeepCopy()
			setImage(changed, CountersignContainer, "attacker.example/cat-the-key:1")
			f.Add(updateReview(f, &injected, changed, ""))
		}
	}
	cfgs := []Config{testConfig(), egressTestConfig()}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, pod, err := Decode(body)
		if err != nil {
			return
		}
		for _, cfg := range cfgs {
			for _, scope := range []Scope{ScopeNamespace, ScopePod} {
				resp := Mutate(req, pod.DeepCopy(), cfg, scope)
				if _, err := Encode(req, resp); err != nil {
					t.Fatalf("encode: %v", err)
				}
				if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
					t.Fatal("a refusal without a reason")
				}
				if req.Operation == admissionv1.Update && resp.Allowed {
					keptGuarded(t, req, pod, cfg)
				}
				if len(resp.Patch) == 0 {
					continue
				}
				if req.Operation != admissionv1.Create {
					t.Fatalf("an %s was patched", req.Operation)
				}
				p, err := jsonpatch.DecodePatch(resp.Patch)
				if err != nil {
					t.Fatal(err)
				}
				out, err := p.Apply(req.Object.Raw)
				if err != nil {
					t.Fatalf("the patch does not apply: %v", err)
				}
				var patched corev1.Pod
				if err := json.Unmarshal(out, &patched); err != nil {
					t.Fatal(err)
				}
				if err := Guarded(&patched, cfg); err != nil {
					t.Fatalf("admitted unguarded: %v", err)
				}
			}
		}
	})
}

// keptGuarded fails t if an admitted UPDATE of a pod that was marked, or
// carries a container or volume named like the injector's, changes the
// injector's label or annotations, adds an ephemeral container, or leaves
// it unguarded with its sidecars changed.
func keptGuarded(t *testing.T, req *admissionv1.AdmissionRequest, pod *corev1.Pod, cfg Config) {
	t.Helper()
	var old corev1.Pod
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		t.Fatal(err)
	}
	ourNames := old.Annotations[StatusKey] != "" ||
		slices.ContainsFunc(containers(&old), func(c view) bool { return ours(c.name) }) ||
		slices.ContainsFunc(old.Spec.Volumes, func(v corev1.Volume) bool { return ourVolume(v.Name) })
	if !ourNames {
		return
	}
	same := func(a, b map[string]string, k string) bool {
		x, okA := a[k]
		y, okB := b[k]
		return okA == okB && x == y
	}
	if !same(old.Labels, pod.Labels, InjectKey) || !same(old.Annotations, pod.Annotations, InjectKey) ||
		!same(old.Annotations, pod.Annotations, StatusKey) || !same(old.Annotations, pod.Annotations, VersionKey) {
		t.Fatalf("an update of a guarded pod changing the injector's label or annotations was admitted")
	}
	for _, e := range pod.Spec.EphemeralContainers {
		if !slices.ContainsFunc(old.Spec.EphemeralContainers, func(o corev1.EphemeralContainer) bool { return o.Name == e.Name }) {
			t.Fatalf("ephemeral container %s was added to a guarded pod", e.Name)
		}
	}
	if Guarded(pod, cfg) == nil {
		return
	}
	sidecars := func(p *corev1.Pod) []corev1.Container {
		return slices.DeleteFunc(slices.Concat(p.Spec.InitContainers, p.Spec.Containers), func(c corev1.Container) bool { return !ours(c.Name) })
	}
	if !equality.Semantic.DeepEqual(sidecars(&old), sidecars(pod)) {
		t.Fatalf("an update leaving a guarded pod unguarded changed its sidecars")
	}
}
