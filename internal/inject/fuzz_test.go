package inject

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// FuzzReview feeds the decoder any bytes: it must never panic, and
// whatever it accepts must be answered, a refusal with a reason and an
// admission with a patch only for a CREATE and only if the patched pod is
// guarded, with egress closed or not.
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
