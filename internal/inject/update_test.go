package inject

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// updateReview is the AdmissionReview the API server sends for an UPDATE
// of old into pod (sub: "" or SubresourceEphemeral).
func updateReview(t testing.TB, old, pod *corev1.Pod, sub string) []byte {
	t.Helper()
	oldRaw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         "7c0f3f39-2c2a-4c2e-9d0b-000000000002",
			Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			SubResource: sub,
			Namespace:   "agents",
			Operation:   admissionv1.Update,
			Object:      runtime.RawExtension{Raw: raw},
			OldObject:   runtime.RawExtension{Raw: oldRaw},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storedPod is a golden case's pod as the API server stores it: injected
// by cfg through the namespace entry when the case is injected, as it was
// created otherwise.
func storedPod(t *testing.T, name string, cfg Config) *corev1.Pod {
	t.Helper()
	body, err := os.ReadFile("testdata/" + name + ".in.json")
	if err != nil {
		t.Fatal(err)
	}
	req, pod, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	resp := Mutate(req, pod, cfg, ScopeNamespace)
	if !resp.Allowed {
		t.Fatalf("%s is refused: %v", name, resp.Result)
	}
	raw := req.Object.Raw
	if len(resp.Patch) > 0 {
		raw = applyRaw(t, raw, resp.Patch)
	}
	var p corev1.Pod
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	p.Namespace = "agents"
	return &p
}

func setImage(p *corev1.Pod, name, image string) {
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == name {
			p.Spec.InitContainers[i].Image = image
		}
	}
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == name {
			p.Spec.Containers[i].Image = image
		}
	}
}

func debugContainer(target string, mounts ...string) corev1.EphemeralContainer {
	e := corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "registry.example/busybox:1.36"},
		TargetContainerName:      target,
	}
	for _, m := range mounts {
		e.VolumeMounts = append(e.VolumeMounts, corev1.VolumeMount{Name: m, MountPath: "/" + m})
	}
	return e
}

type updateCase struct {
	name    string
	sub     string
	edit    func(p *corev1.Pod)
	refused string // "" if the update is admitted
}

func runUpdates(t *testing.T, old *corev1.Pod, cfg Config, scope Scope, cases []updateCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := old.DeepCopy()
			tc.edit(pod)
			req, decoded, err := Decode(updateReview(t, old, pod, tc.sub))
			if err != nil {
				t.Fatalf("the UPDATE is not judged: %v", err)
			}
			resp := Mutate(req, decoded, cfg, scope)
			if len(resp.Patch) > 0 {
				t.Errorf("an UPDATE was patched: %s", resp.Patch)
			}
			switch {
			case tc.refused == "" && !resp.Allowed:
				t.Errorf("refused: %s", resp.Result.Message)
			case tc.refused != "" && resp.Allowed:
				t.Errorf("admitted (%s); want refused for %q", resp.AuditAnnotations[DecisionKey], tc.refused)
			case tc.refused != "" && (resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, tc.refused)):
				t.Errorf("refused without saying %q: %+v", tc.refused, resp.Result)
			}
		})
	}
}

// TestUpdateOfAGuardedPodKeepsItGuarded: Kubernetes lets a pod UPDATE
// change any container's image, and pods/ephemeralcontainers add a
// container that can mount any of the pod's volumes or target a sidecar's
// process namespace. A guarded pod stays guarded: the countersign or envoy
// sidecar's image may not be swapped (the attacker's image would hold the
// rail keys and the ledger URL), the mark may not go, and no ephemeral
// container may be added; labels, annotations and the agent's own image
// may change.
func TestUpdateOfAGuardedPodKeepsItGuarded(t *testing.T) {
	for _, base := range guardedBases() {
		t.Run(base.name, func(t *testing.T) {
			old := storedPod(t, base.name, base.cfg)
			if err := Guarded(old, base.cfg); err != nil {
				t.Fatalf("not guarded to begin with: %v", err)
			}
			runUpdates(t, old, base.cfg, ScopeNamespace, []updateCase{
				{"a label is added", "", func(p *corev1.Pod) { p.Labels["team"] = "payments" }, ""},
				{"the agent's image changes", "", func(p *corev1.Pod) { setImage(p, "agent", "registry.example/agent:1.1") }, ""},
				{"countersign's image is swapped", "", func(p *corev1.Pod) { setImage(p, CountersignContainer, "attacker.example/cat-the-key:1") },
					"the update would leave it unguarded: countersign runs image \"attacker.example/cat-the-key:1\""},
				{"envoy's image is swapped", "", func(p *corev1.Pod) { setImage(p, EnvoyContainer, "attacker.example/envoy:1") },
					"the update would leave it unguarded: countersign-envoy runs image"},
				// The API server refuses an update that changes the init
				// containers other than their images; the injector does not
				// rely on it.
				{"a sidecar of the pod's is put ahead of countersign", "", func(p *corev1.Pod) {
					insertAgentInit(p, container(p.Spec.InitContainers, CountersignContainer), true)
				}, "the update would leave it unguarded: the init containers begin ["},
				{"the mark is removed with the image swapped", "", func(p *corev1.Pod) {
					delete(p.Annotations, StatusKey)
					setImage(p, CountersignContainer, "attacker.example/cat-the-key:1")
				}, "an update may not add, change or remove annotation countersign.io/status"},
				{"the mark is changed", "", func(p *corev1.Pod) { p.Annotations[StatusKey] = "done" }, "an update may not add, change or remove annotation countersign.io/status"},
				{"a debug container on the rail key and the sockets, targeting countersign", SubresourceEphemeral, func(p *corev1.Pod) {
					p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(CountersignContainer, railKeyVolume+"0", SocketVolume))
				}, "ephemeral container debugger may not be added"},
				{"a debug container targeting envoy", SubresourceEphemeral, func(p *corev1.Pod) {
					p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(EnvoyContainer))
				}, "ephemeral container debugger may not be added"},
				{"a debug container with no mount and no target", SubresourceEphemeral, func(p *corev1.Pod) {
					p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(""))
				}, "ephemeral container debugger may not be added"},
			})
		})
	}
}

// TestUpdateOfAPodGuardedByAnEarlierInjector: a pod guarded under an
// earlier configuration (an older countersign image) is not Guarded under
// the current one, yet updates it needs (a label, a finalizer) pass, the
// current image may replace the old one, and any other change to its
// sidecars is refused.
func TestUpdateOfAPodGuardedByAnEarlierInjector(t *testing.T) {
	earlier := testConfig()
	earlier.CountersignImage = "registry.example/countersign:v0.0.9"
	old := storedPod(t, "ns-basic", earlier)
	cfg := testConfig()
	if Guarded(old, cfg) == nil {
		t.Fatal("the earlier pod is guarded under the current configuration")
	}
	runUpdates(t, old, cfg, ScopeNamespace, []updateCase{
		{"a finalizer is added", "", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/keep") }, ""},
		{"countersign moves to the current image", "", func(p *corev1.Pod) { setImage(p, CountersignContainer, cfg.CountersignImage) }, ""},
		{"countersign's image is swapped", "", func(p *corev1.Pod) { setImage(p, CountersignContainer, "attacker.example/cat-the-key:1") },
			"the update changes its sidecars: countersign's image \"registry.example/countersign:v0.0.9\" becomes \"attacker.example/cat-the-key:1\""},
		{"envoy's image is swapped", "", func(p *corev1.Pod) { setImage(p, EnvoyContainer, "attacker.example/envoy:1") },
			"the update changes its sidecars: countersign-envoy's image"},
	})
}

// TestUpdateOfAPodThatIsNotGuarded: in an injected namespace a pod that
// opted out may be updated, and debugged, but an ephemeral container may
// not read the Secrets only Countersign may read (an ephemeral container
// brings its own env and envFrom), and no update may add the injector's
// mark.
func TestUpdateOfAPodThatIsNotGuarded(t *testing.T) {
	cfg := testConfig()
	old := storedPod(t, "ns-opt-out-label", cfg)
	reads := func(e corev1.EphemeralContainer) func(p *corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, e) }
	}
	db := debugContainer("agent")
	db.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cfg.DatabaseSecret}}}}
	key := debugContainer("agent")
	key.Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cfg.RailKeys[0].Secret}, Key: "key",
	}}}}
	runUpdates(t, old, cfg, ScopeNamespace, []updateCase{
		{"its image changes", "", func(p *corev1.Pod) { setImage(p, "agent", "registry.example/agent:2.0") }, ""},
		{"a debug container", SubresourceEphemeral, reads(debugContainer("agent")), ""},
		{"a debug container reading the ledger URL", SubresourceEphemeral, reads(db), "envFrom reads Secret countersign-database"},
		{"a debug container reading a rail key", SubresourceEphemeral, reads(key), "env K reads Secret countersign-stripe-main"},
		{"the injector's mark is added", "", func(p *corev1.Pod) { p.Annotations = map[string]string{StatusKey: StatusInjected} },
			"annotation countersign.io/status is the injector's: an update may not add it"},
	})
}

// TestUpdateKeepsTheInjectorsLabelAndAnnotations: the pod webhook entry
// selects pods by the label countersign.io/inject: "true"
// (objectSelector), and on UPDATE the API server calls it only if the old
// or the new pod matches. An update that removed the label from a guarded
// pod (or set it to "false", or "TRUE": the selector is case-sensitive)
// would be judged once, and the pod's next update (an image swap, an
// ephemeral container) by no webhook at all. So neither that label, nor
// the annotation of the same name, nor the mark or the injector's version
// may change on a guarded pod, through either entry; labels, annotations
// and finalizers of anyone else's may.
func TestUpdateKeepsTheInjectorsLabelAndAnnotations(t *testing.T) {
	cfg := testConfig()
	for _, base := range []struct {
		name  string
		scope Scope
	}{{"pod-label-opt-in", ScopePod}, {"ns-basic", ScopeNamespace}} {
		t.Run(base.name, func(t *testing.T) {
			old := storedPod(t, base.name, cfg)
			if err := Guarded(old, cfg); err != nil {
				t.Fatalf("not guarded to begin with: %v", err)
			}
			const label = "an update may not add, change or remove label countersign.io/inject"
			const annotation = "an update may not add, change or remove annotation countersign.io/inject"
			cases := []updateCase{
				{"another label is added", "", func(p *corev1.Pod) { p.Labels["team"] = "payments" }, ""},
				{"another annotation is added", "", func(p *corev1.Pod) { p.Annotations["example.com/owner"] = "payments" }, ""},
				{"a finalizer is added", "", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/keep") }, ""},
				{"the label is set to \"false\"", "", func(p *corev1.Pod) { p.Labels[InjectKey] = "false" }, label},
				{"the label is set to \"enabled\"", "", func(p *corev1.Pod) { p.Labels[InjectKey] = "enabled" }, label},
				{"the annotation is set to \"false\"", "", func(p *corev1.Pod) { p.Annotations[InjectKey] = "false" }, annotation},
				{"the injector's version is removed", "", func(p *corev1.Pod) { delete(p.Annotations, VersionKey) },
					"an update may not add, change or remove annotation countersign.io/injector-version"},
			}
			if base.scope == ScopePod {
				cases = append(cases,
					updateCase{"the label is removed", "", func(p *corev1.Pod) { delete(p.Labels, InjectKey) },
						label + " (\"true\" would become absent): the pod webhook's objectSelector matches it"},
					updateCase{"the label is set to \"TRUE\"", "", func(p *corev1.Pod) { p.Labels[InjectKey] = "TRUE" }, label},
					updateCase{"the label is removed and the annotation opts in", "", func(p *corev1.Pod) {
						delete(p.Labels, InjectKey)
						p.Annotations[InjectKey] = "true"
					}, label},
				)
			} else {
				cases = append(cases, updateCase{"the label is added", "", func(p *corev1.Pod) { p.Labels[InjectKey] = "true" },
					label + " (absent would become \"true\")"})
			}
			runUpdates(t, old, cfg, base.scope, cases)
		})
	}
}

// TestUpdateOfAGuardedPodWhoseMarkIsGone: the webhooks are not registered
// for pods/status (every kubelet status update would wait on the
// injector), and the API server stores labels and annotations written
// there. A guarded pod whose countersign.io/status mark went that way
// still carries the injector's containers and volumes, which no update
// can remove: it is judged as guarded all the same, so a sidecar's image
// may not be swapped, no ephemeral container added, the mark not put
// back by a pod update; anyone else's labels, annotations and finalizers,
// and the agent's image, may still change. A pod guarded under an earlier
// configuration whose mark went may change nothing of its sidecars.
func TestUpdateOfAGuardedPodWhoseMarkIsGone(t *testing.T) {
	const unmarked = "so it is guarded though it has lost the countersign.io/status mark"
	for _, base := range guardedBases() {
		t.Run(base.name, func(t *testing.T) {
			old := storedPod(t, base.name, base.cfg)
			delete(old.Annotations, StatusKey) // through pods/status: no webhook saw it
			runUpdates(t, old, base.cfg, ScopeNamespace, []updateCase{
				{"a label is added", "", func(p *corev1.Pod) { p.Labels["team"] = "payments" }, ""},
				{"an annotation is added", "", func(p *corev1.Pod) { p.Annotations["example.com/owner"] = "payments" }, ""},
				{"a finalizer is added", "", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/keep") }, ""},
				{"the agent's image changes", "", func(p *corev1.Pod) { setImage(p, "agent", "registry.example/agent:1.1") }, ""},
				{"countersign's image is swapped", "", func(p *corev1.Pod) { setImage(p, CountersignContainer, "attacker.example/cat-the-key:1") },
					"the update would leave it unguarded: countersign runs image \"attacker.example/cat-the-key:1\""},
				{"envoy's image is swapped", "", func(p *corev1.Pod) { setImage(p, EnvoyContainer, "attacker.example/envoy:1") },
					"the update would leave it unguarded: countersign-envoy runs image"},
				{"the sidecars are removed", "", func(p *corev1.Pod) {
					p.Spec.InitContainers = slices.DeleteFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return ours(c.Name) })
				}, "the update would leave it unguarded"},
				{"a debug container on the sockets, targeting countersign", SubresourceEphemeral, func(p *corev1.Pod) {
					p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(CountersignContainer, SocketVolume))
				}, unmarked + ": ephemeral container debugger may not be added"},
				{"a debug container with no mount and no target", SubresourceEphemeral, func(p *corev1.Pod) {
					p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(""))
				}, "ephemeral container debugger may not be added"},
				{"the mark is put back", "", func(p *corev1.Pod) { p.Annotations[StatusKey] = StatusInjected },
					unmarked + ": an update may not add, change or remove annotation countersign.io/status"},
			})
		})
	}
	t.Run("guarded by an earlier injector", func(t *testing.T) {
		earlier := testConfig()
		earlier.CountersignImage = "registry.example/countersign:v0.0.9"
		old := storedPod(t, "ns-basic", earlier)
		delete(old.Annotations, StatusKey)
		cfg := testConfig()
		runUpdates(t, old, cfg, ScopeNamespace, []updateCase{
			{"a finalizer is added", "", func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/keep") }, ""},
			{"countersign's image is swapped", "", func(p *corev1.Pod) { setImage(p, CountersignContainer, "attacker.example/cat-the-key:1") },
				"the update changes its sidecars: countersign's image"},
			{"a debug container", SubresourceEphemeral, func(p *corev1.Pod) {
				p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(""))
			}, "ephemeral container debugger may not be added"},
		})
	})
	t.Run("only a volume of ours is left", func(t *testing.T) {
		// Not a pod an update can make (containers are not removed), but
		// any name of ours is enough to be judged guarded.
		cfg := testConfig()
		old := storedPod(t, "ns-basic", cfg)
		delete(old.Annotations, StatusKey)
		old.Spec.InitContainers = slices.DeleteFunc(old.Spec.InitContainers, func(c corev1.Container) bool { return ours(c.Name) })
		runUpdates(t, old, cfg, ScopeNamespace, []updateCase{
			{"a debug container", SubresourceEphemeral, func(p *corev1.Pod) {
				p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, debugContainer(""))
			}, "it carries the injector's volume countersign-"},
		})
	})
}

// guardedBases are the injected pods the update tests start from: a
// namespace-injected pod and an egress-closing one, each with its
// injector's configuration.
func guardedBases() []struct {
	name string
	cfg  Config
} {
	return []struct {
		name string
		cfg  Config
	}{{"ns-basic", testConfig()}, {"egress-basic", egressTestConfig()}}
}
