package inject

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func serve(t *testing.T, h http.Handler, method, path, contentType string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHandler(t *testing.T) {
	basic, err := os.ReadFile("testdata/ns-basic.in.json")
	if err != nil {
		t.Fatal(err)
	}
	v1beta1, err := os.ReadFile("testdata/bad-v1beta1.in.json")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(testConfig(), nil)
	small := Handler{Config: testConfig(), MaxBody: 1024}
	cases := []struct {
		name        string
		h           http.Handler
		method      string
		path        string
		contentType string
		body        []byte
		code        int
		reason      string
	}{
		{"a review is answered", mux, http.MethodPost, PathNamespace, "application/json", basic, 200, ""},
		{"charset parameter is fine", mux, http.MethodPost, PathNamespace, "application/json; charset=utf-8", basic, 200, ""},
		{"GET", mux, http.MethodGet, PathNamespace, "", nil, 405, "method GET"},
		{"PUT", mux, http.MethodPut, PathPod, "application/json", basic, 405, "POSTed"},
		{"wrong content type", mux, http.MethodPost, PathNamespace, "text/plain", basic, 415, "want application/json"},
		{"no content type", mux, http.MethodPost, PathNamespace, "", basic, 415, "want application/json"},
		{"yaml", mux, http.MethodPost, PathNamespace, "application/yaml", basic, 415, "want application/json"},
		{"larger than the bound", small, http.MethodPost, PathNamespace, "application/json", basic, 413, "larger than 1024 bytes"},
		{"garbage", mux, http.MethodPost, PathNamespace, "application/json", []byte("\x00\xffnot json"), 400, "not a JSON AdmissionReview"},
		{"empty body", mux, http.MethodPost, PathNamespace, "application/json", nil, 400, "not a JSON AdmissionReview"},
		{"JSON but not a review", mux, http.MethodPost, PathNamespace, "application/json", []byte(`[1,2,3]`), 400, "not a JSON AdmissionReview"},
		{"wrong version", mux, http.MethodPost, PathNamespace, "application/json", v1beta1, 400, "only admission.k8s.io/v1"},
		{"unknown path", mux, http.MethodPost, "/mutate", "application/json", basic, 404, ""},
		{"health", mux, http.MethodGet, "/healthz", "", nil, 200, "ok"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := serve(t, tc.h, tc.method, tc.path, tc.contentType, tc.body)
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			if tc.reason != "" && !strings.Contains(w.Body.String(), tc.reason) {
				t.Errorf("body %q does not say %q", w.Body, tc.reason)
			}
			if tc.code == 405 && w.Header().Get("Allow") != http.MethodPost {
				t.Errorf("Allow: %q", w.Header().Get("Allow"))
			}
		})
	}
}

// TestHandlerAnswersTheReview: the answer is an AdmissionReview v1 for the
// same uid, and the pod entry does not inject a pod that did not opt in.
func TestHandlerAnswersTheReview(t *testing.T) {
	basic, err := os.ReadFile("testdata/ns-basic.in.json")
	if err != nil {
		t.Fatal(err)
	}
	mux := NewMux(testConfig(), nil)
	for path, patched := range map[string]bool{PathNamespace: true, PathPod: false} {
		w := serve(t, mux, http.MethodPost, path, "application/json", basic)
		if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s", path, w.Code, w.Header().Get("Content-Type"))
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Request != nil || out.Response == nil {
			t.Fatalf("%s: not a v1 review answer: %s", path, w.Body)
		}
		if out.Response.UID != "7c0f3f39-2c2a-4c2e-9d0b-000000000001" || !out.Response.Allowed || (len(out.Response.Patch) > 0) != patched {
			t.Errorf("%s: %+v", path, out.Response)
		}
	}
}
