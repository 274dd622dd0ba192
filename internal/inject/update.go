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
//   - A pod the injector marked stays marked, and guarded: an update that
//     leaves it unguarded is refused. One guarded under an earlier
//     configuration (another injector's images) may change nothing of its
//     sidecars. No ephemeral container may be added to it at all: debug a
//     copy (kubectl debug --copy-to) instead.
//   - No update may add the mark to a pod the injector did not guard.
//   - In an injected namespace (or a pod that opts in), an ephemeral
//     container added to a pod that is not guarded may not read the
//     Secrets only Countersign may read.
func judgeUpdate(req *admissionv1.AdmissionRequest, pod *corev1.Pod, cfg Config, scope Scope) *admissionv1.AdmissionResponse {
	var old corev1.Pod
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return deny("its oldObject does not decode: " + err.Error())
	}
	was, is := old.Annotations[StatusKey], pod.Annotations[StatusKey]
	added := addedEphemeral(&old, pod)
	if was == "" {
		if is != "" {
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
	if is != was {
		return deny(fmt.Sprintf("it is guarded (%s: %s): an update may not change or remove that annotation", StatusKey, was))
	}
	if len(added) > 0 {
		var names []string
		for _, c := range added {
			names = append(names, c.name)
		}
		return deny(fmt.Sprintf("it is guarded: ephemeral container %s may not be added, as it could mount any volume of the pod (the rail keys, the sockets) "+
			"or share a sidecar's process namespace; debug a copy of the pod instead (kubectl debug --copy-to)", strings.Join(names, ", ")))
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
