package inject

import (
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DecisionKey is the audit annotation that says what the injector did
// (the API server files it under the webhook's name).
const DecisionKey = "decision"

// Mutate judges one decoded review (see Decode). A pod CREATE is left
// alone (not opted in, opted out, a namespace never injected, or already
// exactly as injected), refused with the reasons, or admitted with the
// JSON patch that guards it; a pod that is not opted in, or opts out, is
// still refused if it holds or reads the Secrets only Countersign may
// read. An UPDATE is
// judged by judgeUpdate and never patched. It reads nothing but its
// arguments.
func Mutate(req *admissionv1.AdmissionRequest, pod *corev1.Pod, cfg Config, scope Scope) *admissionv1.AdmissionResponse {
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	if ns == metav1.NamespaceSystem || ns == cfg.Namespace {
		return skip(fmt.Sprintf("skipped: namespace %s is never injected", ns))
	}
	if req.Operation == admissionv1.Update {
		return judgeUpdate(req, pod, cfg, scope)
	}
	in, why, err := optIn(pod, scope)
	if err != nil {
		return deny(err.Error())
	}
	if !in {
		// The rail keys' and the ledger's Secrets live in every namespace
		// the injector serves, the pod entry's included (a pod opted in
		// there needs them beside it): not opting in, or opting out, is
		// no way to read them. (The chart's pod entry is called only for
		// pods labelled to opt in; its ValidatingAdmissionPolicy refuses
		// the others that name those Secrets.)
		reasons := secretRefusals(pod, cfg)
		if _, ok := pod.Annotations[StatusKey]; ok && scope == ScopeNamespace {
			reasons = append(reasons, fmt.Sprintf("annotation %s is the injector's, and this pod is not injected", StatusKey))
		}
		if len(reasons) > 0 {
			return denyPod(why + ", yet " + refusal(reasons).Error())
		}
		return skip("skipped: " + why)
	}
	switch pod.Annotations[StatusKey] {
	case StatusInjected:
		// A CREATE that arrives marked is either the second pass of a
		// reinvocation (the API server calls the injector again, still a
		// CREATE, with the pod it patched once another webhook or an
		// in-tree plugin changed it) or a pod made to look injected: a
		// copy of a guarded pod, or a forgery with sidecars rewired to the
		// pod's liking. Nothing in the request tells them apart, so it is
		// admitted unchanged only if it is exactly what injecting it would
		// make (Guarded: the sidecars and volumes as built, and every
		// whole-pod check of injection), and refused otherwise.
		if err := Guarded(pod, cfg); err != nil {
			return deny(fmt.Sprintf("it arrives marked %s: %s, but it is not the pod the injector makes: %v; "+
				"create it without the mark, the injector's containers and volumes, and it is injected", StatusKey, StatusInjected, err))
		}
		return skip("skipped: already injected")
	case "":
	default:
		return deny(fmt.Sprintf("annotation %s is the injector's; it may only be %q", StatusKey, StatusInjected))
	}
	if reasons := preflight(pod, cfg); len(reasons) > 0 {
		return deny(refusal(reasons).Error())
	}
	ops := patch(pod, build(cfg), cfg.Version)
	doc, guarded, err := apply(req.Object.Raw, ops)
	if err == nil {
		err = Guarded(guarded, cfg)
	}
	if err != nil {
		// Fail closed: a pod that should be guarded is never admitted
		// unguarded, not even through a fault of ours.
		return deny(fmt.Sprintf("the injected pod would not be guarded (an injector fault): %v", err))
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{
		Allowed: true, Patch: doc, PatchType: &pt,
		AuditAnnotations: map[string]string{DecisionKey: "injected: " + why},
	}
}

func skip(why string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, AuditAnnotations: map[string]string{DecisionKey: why}}
}

func deny(why string) *admissionv1.AdmissionResponse {
	return refused("countersign: this agent pod is refused: " + why)
}

// denyPod refuses a pod that is not an agent pod (it opts out).
func denyPod(why string) *admissionv1.AdmissionResponse {
	return refused("countersign: this pod is refused: " + why)
}

func refused(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		Allowed:          false,
		AuditAnnotations: map[string]string{DecisionKey: "refused"},
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusForbidden,
			Reason:  metav1.StatusReasonForbidden,
			Message: msg,
		},
	}
}
