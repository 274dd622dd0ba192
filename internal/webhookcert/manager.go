package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Manager keeps the webhook's serving certificate: Sync makes or renews it
// in the shared Secret, writes the CA bundle into every webhook of the
// MutatingWebhookConfiguration, and only then serves the leaf, so the API
// server trusts a leaf before any replica serves it.
type Manager struct {
	Kube Kube
	// Namespace and SecretName name the Secret the replicas share.
	Namespace, SecretName string
	// WebhookConfig is the MutatingWebhookConfiguration whose caBundle the
	// manager writes.
	WebhookConfig string
	// DNSNames go into the leaf; the first is the one the API server
	// verifies (<service>.<namespace>.svc).
	DNSNames []string
	Policy   Policy
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	Log *slog.Logger

	current atomic.Pointer[tls.Certificate]
}

// ServiceNames are the names the API server may call a Service by.
func ServiceNames(service, namespace string) []string {
	return []string{service + "." + namespace + ".svc", service + "." + namespace, service, service + "." + namespace + ".svc.cluster.local"}
}

// GetCertificate is tls.Config.GetCertificate. Until a Sync succeeds there
// is nothing to serve, and the handshake fails: the API server refuses the
// pod (failurePolicy Fail) rather than admitting it unguarded.
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("webhook TLS: no serving certificate yet (the first sync with the API server has not succeeded)")
}

// conflictRetries bounds how often Sync reads again after another replica
// wrote first.
const conflictRetries = 8

// Sync makes the Secret current, publishes its bundle and serves its leaf.
// On error the leaf already served stays in service.
func (m *Manager) Sync(ctx context.Context) error {
	for range conflictRetries {
		mat, err := m.syncSecret(ctx)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		if err := m.publish(ctx, mat.bundle()); err != nil {
			return err
		}
		if old := m.current.Swap(mat.leafPair); old == nil || !bytes.Equal(old.Certificate[0], mat.leafPair.Certificate[0]) {
			m.log().Info("serving webhook certificate", "not_after", mat.leaf.NotAfter.UTC(), "serial", mat.leaf.SerialNumber.Text(16), "cas", len(mat.cas))
		}
		return nil
	}
	return fmt.Errorf("secret %s/%s or webhook configuration %s kept changing while being written (%d tries)", m.Namespace, m.SecretName, m.WebhookConfig, conflictRetries)
}

func (m *Manager) syncSecret(ctx context.Context) (material, error) {
	now := m.now()
	sec, err := m.Kube.GetSecret(ctx, m.Namespace, m.SecretName)
	missing := errors.Is(err, ErrNotFound)
	if err != nil && !missing {
		return material{}, fmt.Errorf("reading the certificate Secret: %w", err)
	}
	var have map[string][]byte
	if !missing {
		have = sec.Data
	}
	mat, changed, err := parse(have, now).renew(m.Policy, m.DNSNames, now)
	if err != nil {
		return material{}, fmt.Errorf("making certificates: %w", err)
	}
	if !changed && !missing {
		return mat, nil
	}
	data, err := mat.data()
	if err != nil {
		return material{}, err
	}
	if missing {
		sec = &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName, Labels: map[string]string{"app.kubernetes.io/managed-by": "countersign-inject"}},
			Type:       corev1.SecretTypeTLS,
		}
	}
	sec.Data = data
	if missing {
		_, err = m.Kube.CreateSecret(ctx, sec)
	} else {
		_, err = m.Kube.UpdateSecret(ctx, sec)
	}
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return material{}, err
		}
		return material{}, fmt.Errorf("writing the certificate Secret: %w", err)
	}
	m.log().Info("wrote webhook certificates", "secret", m.Namespace+"/"+m.SecretName, "created", missing, "cas", len(mat.cas), "leaf_not_after", mat.leaf.NotAfter.UTC())
	return mat, nil
}

// publish writes bundle into every webhook's caBundle that differs. Each
// replace is guarded by a test of the webhook's name at that index, so a
// configuration reordered in between is read again, not patched blindly.
func (m *Manager) publish(ctx context.Context, bundle []byte) error {
	for range conflictRetries {
		cfg, err := m.Kube.GetWebhookConfig(ctx, m.WebhookConfig)
		if err != nil {
			return fmt.Errorf("reading the webhook configuration: %w", err)
		}
		if len(cfg.Webhooks) == 0 {
			return fmt.Errorf("webhook configuration %s has no webhooks", m.WebhookConfig)
		}
		var ops []map[string]any
		for i, w := range cfg.Webhooks {
			if bytes.Equal(w.ClientConfig.CABundle, bundle) {
				continue
			}
			at := "/webhooks/" + strconv.Itoa(i)
			ops = append(ops,
				map[string]any{"op": "test", "path": at + "/name", "value": w.Name},
				map[string]any{"op": "add", "path": at + "/clientConfig/caBundle", "value": base64.StdEncoding.EncodeToString(bundle)})
		}
		if len(ops) == 0 {
			return nil
		}
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		err = m.Kube.PatchWebhookConfig(ctx, m.WebhookConfig, patch)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the CA bundle into the webhook configuration: %w", err)
		}
		m.log().Info("published webhook CA bundle", "webhook_configuration", m.WebhookConfig, "webhooks", len(ops)/2)
		return nil
	}
	return fmt.Errorf("webhook configuration %s kept changing while being patched", m.WebhookConfig)
}

// Run syncs every interval until ctx ends, logging failures; ready is
// closed after the first success.
func (m *Manager) Run(ctx context.Context, interval time.Duration, ready chan<- struct{}) {
	backoff := time.Second
	for {
		err := m.Sync(ctx)
		wait := interval
		if err != nil {
			m.log().Error("webhook certificate sync failed; serving the last good certificate", "err", err)
			wait = min(backoff, interval)
			backoff = min(2*backoff, interval)
		} else {
			backoff = time.Second
			if ready != nil {
				close(ready)
				ready = nil
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func (m *Manager) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.New(slog.DiscardHandler)
}
