package inject

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// KeyPair serves the webhook's certificate from files and reads them again
// when either changes, so a certificate renewed in place (a Secret volume
// updated by cert-manager) is served without a restart.
type KeyPair struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	certMod  time.Time
	keyMod   time.Time
	certSize int64
	keySize  int64
}

// LoadKeyPair reads the pair once, so a bad pair fails at start.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.GetCertificate(nil); err != nil {
		return nil, err
	}
	return k, nil
}

// GetCertificate is tls.Config.GetCertificate. A pair that fails to load
// after a change keeps the last good one in service.
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cs, cerr := os.Stat(k.certFile)
	ks, kerr := os.Stat(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if cerr != nil || kerr != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("webhook TLS: %w", firstErr(cerr, kerr))
	}
	if k.cert != nil && cs.ModTime().Equal(k.certMod) && ks.ModTime().Equal(k.keyMod) && cs.Size() == k.certSize && ks.Size() == k.keySize {
		return k.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("webhook TLS: %w", err)
	}
	k.cert, k.certMod, k.keyMod, k.certSize, k.keySize = &pair, cs.ModTime(), ks.ModTime(), cs.Size(), ks.Size()
	return k.cert, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
