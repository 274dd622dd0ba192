package ownerauth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/testclock"
)

const (
	testIssuer   = "https://id.example.test/realms/countersign"
	testAudience = "countersign-owner-api"
)

// testOwners are the subjects the tests' issuer signs for that are owners.
var testOwners = []string{"alice", "alice@example.test", "bob"}

func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// signingKey is one of the test issuer's keys.
type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

var (
	keysOnce         sync.Once
	rsaKey, ecKey    *signingKey
	otherRSA, rotKey *signingKey
)

// testKeys generates the keys once per test binary (RSA generation is slow).
func testKeys(t testing.TB) (rsaK, ecK, other, rotated *signingKey) {
	t.Helper()
	keysOnce.Do(func() {
		r1, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		r2, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		e1, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		e2, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		rsaKey = &signingKey{kid: "rsa-1", alg: jose.RS256, priv: r1}
		ecKey = &signingKey{kid: "ec-1", alg: jose.ES256, priv: e1}
		// Same kid as rsaKey, different key: a forged signature.
		otherRSA = &signingKey{kid: "rsa-1", alg: jose.RS256, priv: r2}
		rotKey = &signingKey{kid: "ec-2", alg: jose.ES256, priv: e2}
	})
	return rsaKey, ecKey, otherRSA, rotKey
}

// jwks is the public JWKS of keys.
func jwks(t testing.TB, keys ...*signingKey) []byte {
	t.Helper()
	set := jose.JSONWebKeySet{}
	for _, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sign returns a compact JWT of claims signed by k.
func sign(t testing.TB, k *signingKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimsAt are valid claims for a token issued at now.
func claimsAt(now time.Time, sub string) map[string]any {
	return map[string]any{
		"iss": testIssuer, "aud": []string{testAudience, "other"}, "sub": sub,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
}

func with(c map[string]any, k string, v any) map[string]any {
	out := map[string]any{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

// unsigned returns an "alg: none" token with claims.
func unsigned(t testing.TB, claims map[string]any) string {
	t.Helper()
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"rsa-1"}`))
	p, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return h + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}

// hmacWithPublicKey returns an HS256 token keyed with the RSA public key's
// JWK bytes: the classic algorithm-confusion forgery.
func hmacWithPublicKey(t testing.TB, k *signingKey, claims map[string]any) string {
	t.Helper()
	pub, err := json.Marshal(jose.JSONWebKey{Key: k.priv.Public()})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: pub}, (&jose.SignerOptions{}).WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwksServer serves a JWKS that the test can swap, counting fetches.
type jwksServer struct {
	*httptest.Server
	body    atomic.Pointer[[]byte]
	fetches atomic.Int64
}

func newJWKSServer(t testing.TB, body []byte) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.body.Store(&body)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fetches.Add(1)
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(*s.body.Load())
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(body []byte) { s.body.Store(&body) }

func writeJWKSFile(t testing.TB, body []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(p, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeTokens is an in-memory TokenStore.
type fakeTokens struct {
	byHash map[[32]byte]ledger.OwnerToken
	err    error // returned for every lookup when set
}

func (f *fakeTokens) LookupOwnerToken(_ context.Context, hash [32]byte) (ledger.OwnerToken, error) {
	if f.err != nil {
		return ledger.OwnerToken{}, f.err
	}
	if t, ok := f.byHash[hash]; ok {
		return t, nil
	}
	return ledger.OwnerToken{}, ledger.ErrNotFound
}

// add mints a token for ownerID and stores it as tok describes.
func (f *fakeTokens) add(t testing.TB, tok ledger.OwnerToken) string {
	t.Helper()
	secret, hash, err := ownerauth.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	if f.byHash == nil {
		f.byHash = map[[32]byte]ledger.OwnerToken{}
	}
	f.byHash[hash] = tok
	if sha256.Sum256([]byte(secret)) != hash {
		t.Fatal("MintToken's hash is not the SHA-256 of its secret")
	}
	return secret
}
