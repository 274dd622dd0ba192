package webhookcert

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeAPI is an API server for one Secret and one MutatingWebhookConfiguration
// with the semantics the manager relies on: create refuses an existing
// object (409), update refuses a stale resourceVersion (409), a JSON patch
// that does not apply is 422, and every call must carry the current token.
type fakeAPI struct {
	t     *testing.T
	srv   *httptest.Server
	token string

	mu          sync.Mutex
	rv          int
	secret      []byte // JSON, nil when absent
	webhook     []byte // JSON
	patches     int
	updates     int
	beforePatch func(cfg *admissionregistrationv1.MutatingWebhookConfiguration)
	down        bool
}

const (
	testNamespace = "countersign-system"
	testSecret    = "countersign-injector-tls"
	testWebhook   = "countersign-injector"
)

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, token: "token-1"}
	cfg := admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: testWebhook, ResourceVersion: "1"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "namespace.inject.countersign.io"}, {Name: "pod.inject.countersign.io"},
		},
	}
	f.webhook, _ = json.Marshal(cfg)
	f.rv = 1
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// client is a Client for f with a token file the test can rewrite.
func (f *fakeAPI) client(t *testing.T) (*Client, string) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := pemCert(f.srv.Certificate().Raw)
	c, err := NewClient(f.srv.URL, ca, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return c, tokenFile
}

func (f *fakeAPI) status(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{Status: "Failure", Message: msg, Code: int32(code)})
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		f.status(w, http.StatusServiceUnavailable, "down")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		f.status(w, http.StatusUnauthorized, "bad token")
		return
	}
	body, _ := io.ReadAll(r.Body)
	secrets := "/api/v1/namespaces/" + testNamespace + "/secrets"
	hook := "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + testWebhook
	switch {
	case r.Method == http.MethodGet && r.URL.Path == secrets+"/"+testSecret:
		if f.secret == nil {
			f.status(w, http.StatusNotFound, `secrets "`+testSecret+`" not found`)
			return
		}
		_, _ = w.Write(f.secret)
	case r.Method == http.MethodPost && r.URL.Path == secrets:
		var s corev1.Secret
		if err := json.Unmarshal(body, &s); err != nil || s.Name != testSecret || s.Namespace != testNamespace {
			f.status(w, http.StatusBadRequest, "bad secret")
			return
		}
		if f.secret != nil {
			f.status(w, http.StatusConflict, `secrets "`+testSecret+`" already exists`)
			return
		}
		f.store(w, &s)
	case r.Method == http.MethodPut && r.URL.Path == secrets+"/"+testSecret:
		var s, have corev1.Secret
		if err := json.Unmarshal(body, &s); err != nil || f.secret == nil {
			f.status(w, http.StatusBadRequest, "bad update")
			return
		}
		_ = json.Unmarshal(f.secret, &have)
		if s.ResourceVersion != have.ResourceVersion {
			f.status(w, http.StatusConflict, "the object has been modified; please apply your changes to the latest version and try again")
			return
		}
		f.updates++
		f.store(w, &s)
	case r.Method == http.MethodGet && r.URL.Path == hook:
		_, _ = w.Write(f.webhook)
	case r.Method == http.MethodPatch && r.URL.Path == hook:
		if r.Header.Get("Content-Type") != "application/json-patch+json" {
			f.status(w, http.StatusUnsupportedMediaType, "want a JSON patch")
			return
		}
		if f.beforePatch != nil {
			var cfg admissionregistrationv1.MutatingWebhookConfiguration
			_ = json.Unmarshal(f.webhook, &cfg)
			f.beforePatch(&cfg)
			f.beforePatch = nil
			f.webhook, _ = json.Marshal(cfg)
		}
		p, err := jsonpatch.DecodePatch(body)
		if err != nil {
			f.status(w, http.StatusBadRequest, err.Error())
			return
		}
		out, err := p.Apply(f.webhook)
		if err != nil {
			f.status(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := json.Unmarshal(out, &cfg); err != nil {
			f.status(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		f.patches++
		f.rv++
		cfg.ResourceVersion = strconv.Itoa(f.rv)
		f.webhook, _ = json.Marshal(cfg)
		_, _ = w.Write(f.webhook)
	default:
		f.status(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
	}
}

func (f *fakeAPI) store(w http.ResponseWriter, s *corev1.Secret) {
	f.rv++
	s.ResourceVersion = strconv.Itoa(f.rv)
	f.secret, _ = json.Marshal(s)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(f.secret)
}

func (f *fakeAPI) webhookConfig() admissionregistrationv1.MutatingWebhookConfiguration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := json.Unmarshal(f.webhook, &cfg); err != nil {
		f.t.Fatal(err)
	}
	return cfg
}

func (f *fakeAPI) secretData() map[string][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.secret == nil {
		return nil
	}
	var s corev1.Secret
	if err := json.Unmarshal(f.secret, &s); err != nil {
		f.t.Fatal(err)
	}
	return s.Data
}

func (f *fakeAPI) setSecretData(data map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret, ResourceVersion: strconv.Itoa(f.rv)}, Data: data}
	f.secret, _ = json.Marshal(s)
}

func (f *fakeAPI) counts() (patches, updates int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.patches, f.updates
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
