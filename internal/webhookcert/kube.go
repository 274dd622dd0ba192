// Package webhookcert gives `countersign inject` a serving certificate of its
// own making: a CA and a leaf for the webhook's Service, kept in one Secret
// that every replica shares, renewed before they expire, with the CA bundle
// written into the injector's MutatingWebhookConfiguration so the API server
// trusts what the replicas serve (docs/injection.md, "Certificates").
//
// It speaks to the Kubernetes API with net/http and the pod's service
// account, not client-go: it needs four calls on two objects, and the
// production binary stays small (e2e/production_deps_test.go).
package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Errors a caller acts on: a missing object is created, a conflict (another
// replica wrote first, or the object changed since it was read) is read again.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// The in-cluster service account files (the kubelet keeps the token fresh:
// it is read again for every call).
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	maxResponse       = 4 << 20
)

// Kube is the part of the Kubernetes API the certificate manager uses.
type Kube interface {
	GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	CreateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error)
	// UpdateSecret replaces s if its resourceVersion is still current;
	// ErrConflict otherwise.
	UpdateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error)
	GetWebhookConfig(ctx context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error)
	// PatchWebhookConfig applies an RFC 6902 JSON patch; a failed test
	// operation is ErrConflict.
	PatchWebhookConfig(ctx context.Context, name string, patch []byte) error
}

// Client is Kube over HTTPS with a bearer token.
type Client struct {
	base      *url.URL
	http      *http.Client
	tokenFile string
}

// InCluster is the client a pod's service account gives: the API server at
// KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, verified against the
// service account's CA, authenticated by its token.
func InCluster() (*Client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: --tls-mode=self runs in a pod with its service account token mounted")
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("the service account's CA: %w (is automountServiceAccountToken false?)", err)
	}
	return NewClient("https://"+net.JoinHostPort(host, port), ca, serviceAccountDir+"/token")
}

// NewClient talks to the API server at server, trusting only caPEM, with
// the bearer token read from tokenFile for every call.
func NewClient(server string, caPEM []byte, tokenFile string) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("API server URL must be https://host[:port], got %q", server)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the API server's CA holds no PEM certificate")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{base: u, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, tokenFile: tokenFile}, nil
}

// GetSecret reads a Secret; ErrNotFound when there is none.
func (c *Client) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	return &s, c.do(ctx, http.MethodGet, secretPath(namespace, name), "", nil, &s)
}

// CreateSecret creates s; ErrConflict when it exists already.
func (c *Client) CreateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error) {
	var out corev1.Secret
	return &out, c.do(ctx, http.MethodPost, secretPath(s.Namespace, ""), "application/json", s, &out)
}

// UpdateSecret replaces s if its resourceVersion is still current; ErrConflict otherwise.
func (c *Client) UpdateSecret(ctx context.Context, s *corev1.Secret) (*corev1.Secret, error) {
	var out corev1.Secret
	return &out, c.do(ctx, http.MethodPut, secretPath(s.Namespace, s.Name), "application/json", s, &out)
}

// GetWebhookConfig reads a MutatingWebhookConfiguration.
func (c *Client) GetWebhookConfig(ctx context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var w admissionregistrationv1.MutatingWebhookConfiguration
	return &w, c.do(ctx, http.MethodGet, webhookPath(name), "", nil, &w)
}

// PatchWebhookConfig applies an RFC 6902 JSON patch; ErrConflict when it does not apply.
func (c *Client) PatchWebhookConfig(ctx context.Context, name string, patch []byte) error {
	return c.do(ctx, http.MethodPatch, webhookPath(name), "application/json-patch+json", json.RawMessage(patch), nil)
}

func secretPath(namespace, name string) string {
	p := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/secrets"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

func webhookPath(name string) string {
	return "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + url.PathEscape(name)
}

// do sends one request and decodes a 2xx answer into out; any other answer
// is an error carrying the API server's Status message.
func (c *Client) do(ctx context.Context, method, path, contentType string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := *c.base
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return fmt.Errorf("service account token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if len(raw) > maxResponse {
		return fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxResponse)
	}
	if resp.StatusCode/100 != 2 {
		var st metav1.Status
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		if len(msg) > 512 {
			msg = msg[:512] + "…"
		}
		err := fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
		switch resp.StatusCode {
		case http.StatusNotFound:
			return errors.Join(ErrNotFound, err)
		case http.StatusConflict:
			return errors.Join(ErrConflict, err)
		case http.StatusUnprocessableEntity:
			// A JSON patch that does not apply (a test operation failed):
			// the API server answers 422 (k8s.io/apiserver,
			// pkg/endpoints/handlers/patch.go, jsonPatcher.applyJSPatch).
			if method == http.MethodPatch {
				return errors.Join(ErrConflict, err)
			}
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}
