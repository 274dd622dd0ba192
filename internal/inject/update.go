package inject

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// judgeUpdate judges an UPDATE of a pod, or of its ephemeral containers
// (the pods/ephemeralcontainers subresource, kubectl debug). Kubernetes
// lets an update change little of a running pod, but among it every
// container's image, a sidecar's included (a countersign image of the
// attacker's would hold the rail keys and the ledger URL), and through the
// subresource it adds ephemeral containers, which may mount any volume of
// the pod and share a container's process namespace. It never patches.
//
//   - A pod the injector marked, or one that carries a container or volume
//     of the injector's (the mark can be removed through pods/status, which
//     no webhook sees; the containers and volumes no update can remove),
//     stays guarded: an update that leaves it unguarded is refused. One
//     guarded under an earlier configuration (another injector's images)
//     may change nothing of its sidecars. Its countersign.io/inject label
//     and annotation, the mark and the injector's version stay as they are:
//     the pod webhook's objectSelector reads the label, and an update
//     matching it neither before nor after reaches no webhook at all. No
//     ephemeral container may be added to it: debug a copy (kubectl debug
//     --copy-to) instead.
//   - No update may add the mark to a pod the injector did not guard.
//   - In an injected namespace (or a pod that opts in), an ephemeral
//     container added to a pod that is not guarded may not read the
//     Secrets only Countersign may read.
func judgeUpdate(req *admissionv1.AdmissionRequest, pod *corev1.Pod, cfg Config, scope Scope) *admissionv1.AdmissionResponse {
	var old corev1.Pod
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return deny("its oldObject does not decode: " + err.Error())
	}
	added := addedEphemeral(&old, pod)
	guarded := guardedBefore(&old)
	if guarded == "" {
		if pod.Annotations[StatusKey] != "" {
			return denyPod(fmt.Sprintf("annotation %s is the injector's: an update may not add it", StatusKey))
		}
		in, _, err := optIn(pod, scope)
		if scope == ScopeNamespace || in || err != nil {
			vols, protected := volumeMap(pod), protectedSecrets(cfg)
			var reasons []string
			for _, c := range added {
				reasons = append(reasons, secretReads(c, vols, protected)...)
			}
			if len(reasons) > 0 {
				return denyPod(refusal(reasons).Error())
			}
		}
		return skip("update: the pod is not guarded")
	}
	if why := ownMetadataChanged(&old, pod); why != "" {
		return deny(guarded + ": an update may not " + why)
	}
	if len(added) > 0 {
		var names []string
		for _, c := range added {
			names = append(names, c.name)
		}
		return deny(fmt.Sprintf("%s: ephemeral container %s may not be added, as it could mount any volume of the pod (the rail keys, the sockets) "+
			"or share a sidecar's process namespace; debug a copy of the pod instead (kubectl debug --copy-to)", guarded, strings.Join(names, ", ")))
	}
	if err := Guarded(pod, cfg); err != nil {
		if Guarded(&old, cfg) == nil {
			return deny(fmt.Sprintf("the update would leave it unguarded: %v", err))
		}
		// Guarded under an earlier configuration (an older injector's
		// images): updates the pod may still need (labels, finalizers)
		// pass, but none may touch what guards it.
		if why := sidecarsChanged(&old, pod); why != "" {
			return deny("the update changes its sidecars: " + why)
		}
	}
	return skip("update: the pod stays guarded")
}

// guardedBefore says why an update's old pod is taken for a guarded one,
// "" if it is not: the injector's mark, or else a container or volume
// named like the injector's. The mark alone is not enough: pods/status
// (which no webhook is registered for, as every kubelet status update
// would wait on the injector) stores metadata too, so the mark can go
// unseen; the containers and volumes stay, as an update cannot remove
// them, and a pod the injector did not guard is refused with them on
// CREATE when it is opted in.
func guardedBefore(old *corev1.Pod) string {
	if v := old.Annotations[StatusKey]; v != "" {
		return fmt.Sprintf("it is guarded (%s: %s)", StatusKey, v)
	}
	const unmarked = "it carries the injector's %s %s, so it is guarded though it has lost the %s mark"
	for _, c := range containers(old) {
		if ours(c.name) {
			return fmt.Sprintf(unmarked, "container", c.name, StatusKey)
		}
	}
	for _, v := range old.Spec.Volumes {
		if ourVolume(v.Name) {
			return fmt.Sprintf(unmarked, "volume", v.Name, StatusKey)
		}
	}
	return ""
}

// ownMetadataChanged says how an update of a guarded pod changes a label
// or annotation of the injector's, "" if it does not. Each is kept as it
// is: InjectKey as a label is what the pod webhook's objectSelector
// matches (and on UPDATE the API server calls the webhook only if the old
// or the new pod matches, so a pod whose label goes is judged once more
// and then never), and as a label or annotation it opts the pod in or
// out; the mark and the version record the injection.
func ownMetadataChanged(old, pod *corev1.Pod) string {
	for _, k := range []struct {
		what, key string
		was, is   map[string]string
		because   string
	}{
		{"annotation", StatusKey, old.Annotations, pod.Annotations, "the injector's mark"},
		{"label", InjectKey, old.Labels, pod.Labels,
			"the pod webhook's objectSelector matches it, and an update that matches it neither before nor after is judged by no webhook"},
		{"annotation", InjectKey, old.Annotations, pod.Annotations, "it opts the pod in or out"},
		{"annotation", VersionKey, old.Annotations, pod.Annotations, "the injector's record of the injection"},
	} {
		a, hadIt := k.was[k.key]
		b, hasIt := k.is[k.key]
		if hadIt == hasIt && a == b {
			continue
		}
		show := func(v string, ok bool) string {
			if !ok {
				return "absent"
			}
			return fmt.Sprintf("%q", v)
		}
		return fmt.Sprintf("add, change or remove %s %s (%s would become %s): %s",
			k.what, k.key, show(a, hadIt), show(b, hasIt), k.because)
	}
	return ""
}

// addedEphemeral are pod's ephemeral containers that old did not have.
func addedEphemeral(old, pod *corev1.Pod) []view {
	var out []view
	for _, c := range containers(pod) {
		if !strings.HasPrefix(c.field, "spec.ephemeralContainers") {
			continue
		}
		if !slices.ContainsFunc(old.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool { return e.Name == c.name }) {
			out = append(out, c)
		}
	}
	return out
}

// sidecarsChanged says how the update changes a container of the
// injector's (countersign, countersign-envoy, countersign-egress), "" if
// it does not.
func sidecarsChanged(old, pod *corev1.Pod) string {
	all := func(p *corev1.Pod) map[string]corev1.Container {
		m := map[string]corev1.Container{}
		for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
			if ours(c.Name) {
				m[c.Name] = c
			}
		}
		return m
	}
	was, is := all(old), all(pod)
	for _, name := range []string{EgressContainer, CountersignContainer, EnvoyContainer} {
		a, inOld := was[name]
		b, inNew := is[name]
		switch {
		case inOld != inNew:
			return name + " is added or removed"
		case inOld && a.Image != b.Image:
			return fmt.Sprintf("%s's image %q becomes %q", name, a.Image, b.Image)
		case inOld && !equality.Semantic.DeepEqual(a, b):
			return name + " is changed"
		}
	}
	return ""
}
