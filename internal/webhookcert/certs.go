package webhookcert

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// The Secret's keys. ca.crt is the bundle the API server trusts (every CA
// still valid, oldest first) and ca.key their keys in the same order; tls.crt
// and tls.key are the leaf every replica serves.
const (
	KeyCABundle = "ca.crt"
	KeyCAKeys   = "ca.key"
	KeyLeaf     = "tls.crt"
	KeyLeafKey  = "tls.key"
)

// Policy is how long certificates live and when they are replaced.
//
// A new CA is published (added to the bundle) once no CA in it has two leaf
// lifetimes left, and it signs leaves only once the older one has less than
// one: so every CA is in the API server's bundle at least a leaf lifetime
// before any replica serves a leaf it signed, and a leaf never outlives the
// CA that signed it.
type Policy struct {
	CAValidity, LeafValidity, LeafRenewBefore time.Duration
}

// DefaultPolicy is a ten-year CA and 90-day leaves renewed 30 days before they
// expire.
var DefaultPolicy = Policy{CAValidity: 10 * 365 * 24 * time.Hour, LeafValidity: 90 * 24 * time.Hour, LeafRenewBefore: 30 * 24 * time.Hour}

// Validate names a policy that cannot work.
func (p Policy) Validate() error {
	switch {
	case p.LeafValidity < time.Hour:
		return fmt.Errorf("leaf validity must be at least 1h, got %s", p.LeafValidity)
	case p.LeafRenewBefore <= 0 || p.LeafRenewBefore >= p.LeafValidity:
		return fmt.Errorf("leaf renewal (%s before expiry) must be positive and shorter than the leaf validity %s", p.LeafRenewBefore, p.LeafValidity)
	case p.CAValidity < 4*p.LeafValidity:
		return fmt.Errorf("CA validity %s must be at least four leaf lifetimes (%s)", p.CAValidity, 4*p.LeafValidity)
	}
	return nil
}

// skew back-dates every certificate, for API servers whose clocks run late.
const skew = 5 * time.Minute

type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// material is the Secret's content, parsed.
type material struct {
	cas      []authority // oldest first
	leaf     *x509.Certificate
	leafPEM  []byte
	leafKey  []byte
	leafPair *tls.Certificate
}

// parse reads what it can of data: CAs that are unexpired and match their
// keys, and the leaf if it parses with its key. Anything else is dropped
// and made again (the Secret is the injector's own; nothing else writes it).
func parse(data map[string][]byte, now time.Time) material {
	var m material
	certs := pemBlocks(data[KeyCABundle], "CERTIFICATE")
	keys := pemBlocks(data[KeyCAKeys], "PRIVATE KEY")
	for i, der := range certs {
		if i >= len(keys) {
			break
		}
		c, err := x509.ParseCertificate(der)
		if err != nil || !c.IsCA || !now.Before(c.NotAfter) {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(keys[i])
		signer, ok := k.(crypto.Signer)
		if err != nil || !ok || !publicKeysEqual(signer.Public(), c.PublicKey) {
			continue
		}
		m.cas = append(m.cas, authority{cert: c, key: signer})
	}
	if pair, err := tls.X509KeyPair(data[KeyLeaf], data[KeyLeafKey]); err == nil && pair.Leaf != nil {
		m.leaf, m.leafPEM, m.leafKey, m.leafPair = pair.Leaf, data[KeyLeaf], data[KeyLeafKey], &pair
	}
	return m
}

// renew brings m up to p at now for names, and says whether it changed.
func (m material) renew(p Policy, names []string, now time.Time) (material, bool, error) {
	changed := false
	if m.remaining(now) < 2*p.LeafValidity {
		ca, err := newAuthority(now, p.CAValidity)
		if err != nil {
			return m, false, err
		}
		m.cas = append(slices.Clone(m.cas), ca)
		changed = true
	}
	if !m.leafGood(p, names, now) {
		signer := m.signer(p, now)
		leafPEM, keyPEM, err := newLeaf(signer, names, now, p.LeafValidity)
		if err != nil {
			return m, false, err
		}
		pair, err := tls.X509KeyPair(leafPEM, keyPEM)
		if err != nil {
			return m, false, err
		}
		m.leaf, m.leafPEM, m.leafKey, m.leafPair = pair.Leaf, leafPEM, keyPEM, &pair
		changed = true
	}
	return m, changed, nil
}

// remaining is the longest time any CA in the bundle has left.
func (m material) remaining(now time.Time) time.Duration {
	var best time.Duration
	for _, ca := range m.cas {
		best = max(best, ca.cert.NotAfter.Sub(now))
	}
	return best
}

// signer is the oldest CA with a whole leaf lifetime left, else the newest.
func (m material) signer(p Policy, now time.Time) authority {
	for _, ca := range m.cas {
		if ca.cert.NotAfter.Sub(now) >= p.LeafValidity {
			return ca
		}
	}
	return m.cas[len(m.cas)-1]
}

// leafGood: the leaf verifies against the bundle for every name, now and
// for longer than the renewal margin.
func (m material) leafGood(p Policy, names []string, now time.Time) bool {
	if m.leaf == nil || m.leaf.NotAfter.Sub(now) < p.LeafRenewBefore || !slices.Equal(m.leaf.DNSNames, names) {
		return false
	}
	roots := x509.NewCertPool()
	for _, ca := range m.cas {
		roots.AddCert(ca.cert)
	}
	_, err := m.leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: names[0], CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// bundle is the PEM the API server trusts: every CA, oldest first.
func (m material) bundle() []byte {
	var b bytes.Buffer
	for _, ca := range m.cas {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	}
	return b.Bytes()
}

func (m material) data() (map[string][]byte, error) {
	var keys bytes.Buffer
	for _, ca := range m.cas {
		der, err := x509.MarshalPKCS8PrivateKey(ca.key)
		if err != nil {
			return nil, err
		}
		_ = pem.Encode(&keys, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	return map[string][]byte{KeyCABundle: m.bundle(), KeyCAKeys: keys.Bytes(), KeyLeaf: m.leafPEM, KeyLeafKey: m.leafKey}, nil
}

func newAuthority(now time.Time, validity time.Duration) (authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return authority{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return authority{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "countersign-inject CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return authority{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return authority{}, err
	}
	return authority{cert: cert, key: key}, nil
}

// newLeaf signs a serving certificate for names, living no longer than ca.
func newLeaf(ca authority, names []string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-skew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func pemBlocks(b []byte, typ string) [][]byte {
	var out [][]byte
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type == typ {
			out = append(out, blk.Bytes)
		}
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
