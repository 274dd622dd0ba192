package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrMalformed wraps every reason a review is refused before it is judged:
// the HTTP edge answers it with 400 and the reason.
var ErrMalformed = errors.New("malformed admission review")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

var reviewGVK = admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")

// SubresourceEphemeral is the pods subresource through which ephemeral
// containers are added (kubectl debug): they cannot be set on CREATE.
const SubresourceEphemeral = "ephemeralcontainers"

// Decode parses an AdmissionReview (admission.k8s.io/v1 only) and checks it
// is what this webhook is registered for: a request with a uid to CREATE a
// core/v1 Pod, or to UPDATE one (pods, or its pods/ephemeralcontainers
// subresource) with the pod as it was, each pod decodable. Every error
// wraps ErrMalformed.
func Decode(body []byte) (*admissionv1.AdmissionRequest, *corev1.Pod, error) {
	var review admissionv1.AdmissionReview
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&review); err != nil {
		return nil, nil, malformed("not a JSON AdmissionReview: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, malformed("data after the AdmissionReview")
	}
	if gv := review.APIVersion; gv != reviewGVK.GroupVersion().String() {
		return nil, nil, malformed("apiVersion %q: only %s is served (set admissionReviewVersions: [v1])", gv, reviewGVK.GroupVersion())
	}
	if review.Kind != reviewGVK.Kind {
		return nil, nil, malformed("kind %q: want %s", review.Kind, reviewGVK.Kind)
	}
	req := review.Request
	switch {
	case req == nil:
		return nil, nil, malformed("no request")
	case review.Response != nil:
		return nil, nil, malformed("a review to judge carries no response")
	case req.UID == "":
		return nil, nil, malformed("request has no uid")
	case req.Kind != metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}:
		return nil, nil, malformed("request kind %s: only core/v1 Pod is served", fmtGVK(req.Kind))
	case req.Resource != metav1.GroupVersionResource{Version: "v1", Resource: "pods"}:
		return nil, nil, malformed("resource %s: only core/v1 pods is served", fmtGVR(req.Resource))
	case req.Operation == admissionv1.Create && req.SubResource == "":
	case req.Operation == admissionv1.Update && (req.SubResource == "" || req.SubResource == SubresourceEphemeral):
		if len(req.OldObject.Raw) == 0 {
			return nil, nil, malformed("an UPDATE has no oldObject")
		}
		if _, err := decodePod(req.OldObject.Raw, "oldObject"); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, malformed("operation %q of pods%s: only CREATE of pods and UPDATE of pods and pods/%s are served",
			req.Operation, subPath(req.SubResource), SubresourceEphemeral)
	}
	if len(req.Object.Raw) == 0 {
		return nil, nil, malformed("request has no object")
	}
	pod, err := decodePod(req.Object.Raw, "object")
	if err != nil {
		return nil, nil, err
	}
	return req, pod, nil
}

// decodePod decodes a review's object or oldObject as a v1 Pod.
func decodePod(raw []byte, what string) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, malformed("%s is not a Pod: %v", what, err)
	}
	if (pod.APIVersion != "" || pod.Kind != "") && (pod.APIVersion != "v1" || pod.Kind != "Pod") {
		return nil, malformed("%s is %s %s, not v1 Pod", what, pod.APIVersion, pod.Kind)
	}
	return &pod, nil
}

func subPath(sub string) string {
	if sub == "" {
		return ""
	}
	return "/" + sub
}

// Encode wraps resp in an AdmissionReview v1 answering req.
func Encode(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	resp.UID = req.UID
	return json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewGVK.GroupVersion().String(), Kind: reviewGVK.Kind},
		Response: resp,
	})
}

func fmtGVK(k metav1.GroupVersionKind) string {
	if k.Group == "" {
		return k.Version + "/" + k.Kind
	}
	return k.Group + "/" + k.Version + "/" + k.Kind
}

func fmtGVR(r metav1.GroupVersionResource) string {
	if r.Group == "" {
		return r.Version + "/" + r.Resource
	}
	return r.Group + "/" + r.Version + "/" + r.Resource
}
