package ownerauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/testclock"
)

// newOIDC returns an authenticator whose JWKS comes from a URL or a file.
func newOIDC(t *testing.T, clk *testclock.Clock, source string, body []byte, mutate func(*ownerauth.Config)) *ownerauth.Authenticator {
	t.Helper()
	cfg := ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, Now: clk.Now}
	switch source {
	case "url":
		cfg.JWKSURL = newJWKSServer(t, body).URL + "/jwks"
	case "file":
		cfg.JWKSFile = writeJWKSFile(t, body)
	default:
		t.Fatalf("unknown source %q", source)
	}
	if mutate != nil {
		mutate(&cfg)
	}
	a, err := ownerauth.New(cfg, &fakeTokens{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestOIDC(t *testing.T) {
	rsaK, ecK, forger, _ := testKeys(t)
	body := jwks(t, rsaK, ecK)
	clk := newClock()
	now := clk.Now()
	valid := claimsAt(now, "alice")
	tag := sha256.Sum256([]byte(testIssuer))
	wantID := "oidc:" + hex.EncodeToString(tag[:6]) + ":alice"

	tests := []struct {
		name    string
		header  string
		claim   string // subject claim; "" = default
		wantID  string // "" = refused
		wantErr error
		errHas  string
	}{
		{name: "valid RS256", header: "Bearer " + sign(t, rsaK, valid), wantID: wantID},
		{name: "valid ES256", header: "Bearer " + sign(t, ecK, valid), wantID: wantID},
		{name: "scheme is case-insensitive", header: "bearer " + sign(t, ecK, valid), wantID: wantID},
		{name: "a single audience string", header: "Bearer " + sign(t, ecK, with(valid, "aud", testAudience)), wantID: wantID},
		{name: "expired a moment ago is within leeway", header: "Bearer " + sign(t, rsaK, with(valid, "exp", now.Add(-10*time.Second).Unix())), wantID: wantID},
		{name: "configured subject claim", claim: "email",
			header: "Bearer " + sign(t, rsaK, with(with(valid, "email", "alice@example.test"), "email_verified", true)),
			wantID: "oidc:" + hex.EncodeToString(tag[:6]) + ":alice@example.test"},

		{name: "wrong issuer", header: "Bearer " + sign(t, rsaK, with(valid, "iss", "https://evil.example.test")), wantErr: ownerauth.ErrUnauthenticated, errHas: "issuer"},
		{name: "wrong audience", header: "Bearer " + sign(t, rsaK, with(valid, "aud", []string{"someone-else"})), wantErr: ownerauth.ErrUnauthenticated, errHas: "audience"},
		{name: "no audience", header: "Bearer " + sign(t, rsaK, with(valid, "aud", nil)), wantErr: ownerauth.ErrUnauthenticated, errHas: "audience"},
		{name: "expired", header: "Bearer " + sign(t, rsaK, with(valid, "exp", now.Add(-2*time.Minute).Unix())), wantErr: ownerauth.ErrUnauthenticated, errHas: "expired"},
		{name: "no exp", header: "Bearer " + sign(t, rsaK, with(valid, "exp", nil)), wantErr: ownerauth.ErrUnauthenticated, errHas: "exp"},
		{name: "not valid yet", header: "Bearer " + sign(t, rsaK, with(valid, "nbf", now.Add(10*time.Minute).Unix())), wantErr: ownerauth.ErrUnauthenticated, errHas: "not valid yet"},
		{name: "bad signature (another key, same kid)", header: "Bearer " + sign(t, forger, valid), wantErr: ownerauth.ErrUnauthenticated, errHas: "verify"},
		{name: "tampered payload", header: "Bearer " + tamper(t, sign(t, rsaK, valid)), wantErr: ownerauth.ErrUnauthenticated},
		{name: "alg none", header: "Bearer " + unsigned(t, valid), wantErr: ownerauth.ErrUnauthenticated, errHas: "algorithm"},
		{name: "HS256 keyed with the public key", header: "Bearer " + hmacWithPublicKey(t, rsaK, valid), wantErr: ownerauth.ErrUnauthenticated, errHas: "algorithm"},
		{name: "subject claim missing", header: "Bearer " + sign(t, rsaK, with(valid, "sub", nil)), wantErr: ownerauth.ErrUnauthenticated, errHas: `"sub"`},
		{name: "subject claim not a string", header: "Bearer " + sign(t, rsaK, with(valid, "sub", 42)), wantErr: ownerauth.ErrUnauthenticated, errHas: `"sub"`},
		{name: "subject with a control character", header: "Bearer " + sign(t, rsaK, with(valid, "sub", "a\nb")), wantErr: ownerauth.ErrUnauthenticated},
		{name: "subject too long for an owner id", header: "Bearer " + sign(t, rsaK, with(valid, "sub", strings.Repeat("a", 111))), wantErr: ownerauth.ErrUnauthenticated},
		{name: "garbage", header: "Bearer not.a.jwt", wantErr: ownerauth.ErrUnauthenticated},
		{name: "an agent credential", header: "Bearer csk_" + strings.Repeat("a", 52), wantErr: ownerauth.ErrAgentCredential},
	}
	for _, source := range []string{"url", "file"} {
		for _, tc := range tests {
			t.Run(source+"/"+tc.name, func(t *testing.T) {
				a := newOIDC(t, clk, source, body, func(c *ownerauth.Config) { c.SubjectClaim = tc.claim })
				o, err := a.Authenticate(context.Background(), tc.header)
				if tc.wantID != "" {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					if o.ID != tc.wantID || o.Method != ownerauth.MethodOIDC || o.Subject == "" {
						t.Fatalf("owner = %+v, want id %q by oidc", o, tc.wantID)
					}
					return
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if tc.errHas != "" && !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %q, want it to mention %q", err, tc.errHas)
				}
				if o != (ownerauth.Owner{}) {
					t.Fatalf("a refusal returned an owner: %+v", o)
				}
			})
		}
	}
}

// tamper rewrites the subject in the payload without re-signing.
func tamper(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	p, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(p, &claims); err != nil {
		t.Fatal(err)
	}
	claims["sub"] = "mallory"
	if p, err = json.Marshal(claims); err != nil {
		t.Fatal(err)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString(p)
	return strings.Join(parts, ".")
}

// The issuer rotates to a new key: the first token with its kid reloads the
// JWKS, and tokens with made-up kids cannot make Countersign fetch more than
// once per minimum interval.
func TestJWKSRotationAndReloadBound(t *testing.T) {
	rsaK, _, _, rotated := testKeys(t)
	clk := newClock()
	srv := newJWKSServer(t, jwks(t, rsaK))
	a, err := ownerauth.New(ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSURL: srv.URL,
		Now: clk.Now, KeysMinReload: 30 * time.Second, KeysMaxAge: time.Hour}, &fakeTokens{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if srv.fetches.Load() != 0 {
		t.Fatal("a JWKS URL must be fetched on first use, not at start-up")
	}
	if _, err := a.Authenticate(ctx, "Bearer "+sign(t, rsaK, claimsAt(clk.Now(), "alice"))); err != nil {
		t.Fatal(err)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches after the first token, want 1", n)
	}
	// A flood of tokens with a kid the issuer never published.
	for i := range 50 {
		forged := sign(t, &signingKey{kid: "made-up", alg: rotated.alg, priv: rotated.priv}, claimsAt(clk.Now(), "mallory"))
		if _, err := a.Authenticate(ctx, "Bearer "+forged); !errors.Is(err, ownerauth.ErrUnauthenticated) {
			t.Fatalf("made-up kid %d: err = %v", i, err)
		}
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches after 50 unknown kids within the reload interval, want still 1", n)
	}
	srv.set(jwks(t, rsaK, rotated))
	tok := sign(t, rotated, claimsAt(clk.Now(), "bob"))
	if _, err := a.Authenticate(ctx, "Bearer "+tok); !errors.Is(err, ownerauth.ErrUnauthenticated) {
		t.Fatalf("the new key was picked up inside the reload interval: %v", err)
	}
	clk.Advance(31 * time.Second)
	o, err := a.Authenticate(ctx, "Bearer "+sign(t, rotated, claimsAt(clk.Now(), "bob")))
	if err != nil || o.Subject != "bob" {
		t.Fatalf("after the interval the rotated key must verify: %+v, %v", o, err)
	}
	if n := srv.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	// The issuer goes down: the keys already held keep working.
	srv.set([]byte("<html>502</html>"))
	clk.Advance(2 * time.Hour)
	if _, err := a.Authenticate(ctx, "Bearer "+sign(t, rsaK, claimsAt(clk.Now(), "alice"))); err != nil {
		t.Fatalf("a failed reload dropped the keys in use: %v", err)
	}
}

func TestAnIssuerDownAtFirstUseRefuses(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	clk := newClock()
	srv := newJWKSServer(t, []byte("not json"))
	a, err := ownerauth.New(ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSURL: srv.URL, Now: clk.Now}, &fakeTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Authenticate(context.Background(), "Bearer "+sign(t, rsaK, claimsAt(clk.Now(), "alice")))
	if !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), "keys unavailable") {
		t.Fatalf("err = %v, want unauthenticated: keys unavailable", err)
	}
}

func TestConfigValidation(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	good := writeJWKSFile(t, jwks(t, rsaK))
	private := writeJWKSFile(t, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}`))
	tests := []struct {
		name   string
		cfg    ownerauth.Config
		errHas string // "" = accepted
	}{
		{"OIDC off", ownerauth.Config{}, ""},
		{"file", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSFile: good}, ""},
		{"https URL", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSURL: "https://id.example.test/jwks"}, ""},
		{"http to loopback", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSURL: "http://127.0.0.1:8081/jwks"}, ""},
		{"no issuer", ownerauth.Config{Audience: testAudience, JWKSFile: good}, "owner-issuer"},
		{"no audience", ownerauth.Config{Issuer: testIssuer, JWKSFile: good}, "owner-audience"},
		{"no keys", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners}, "owner-jwks-url or owner-jwks-file"},
		{"both key sources", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSFile: good, JWKSURL: "https://x/jwks"}, "exclusive"},
		{"plain http elsewhere", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSURL: "http://id.example.test/jwks"}, "https"},
		{"missing file", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSFile: "/nonexistent/jwks.json"}, "owner-jwks-file"},
		{"a file of symmetric keys only", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSFile: private}, "no usable public signing key"},
		{"HMAC algorithm", ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSFile: good, Algorithms: []jose.SignatureAlgorithm{jose.HS256}}, "HS256"},
		{"subject claim without OIDC", ownerauth.Config{SubjectClaim: "email"}, "owner-subject-claim"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ownerauth.New(tc.cfg, &fakeTokens{})
			if tc.errHas == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.errHas)
			}
		})
	}
}

func TestJWTRefusedWhenOIDCIsOff(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	a, err := ownerauth.New(ownerauth.Config{}, &fakeTokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Authenticate(context.Background(), "Bearer "+sign(t, rsaK, claimsAt(time.Now(), "alice")))
	if !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), "OIDC is not configured") {
		t.Fatalf("err = %v", err)
	}
}
