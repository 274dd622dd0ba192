package ownerauth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/ownerauth"
)

// In the agent's pod the agent shares loopback, so the issuer and the JWKS
// URL must be https there, though plain http to loopback is accepted
// elsewhere (a local issuer proxy).
func TestInAgentPodRefusesPlainHTTPIssuer(t *testing.T) {
	base := ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, JWKSURL: "https://id.example.test/keys"}
	for _, tc := range []struct {
		name    string
		mod     func(c *ownerauth.Config)
		refused string // "" when accepted in the pod too
	}{
		{name: "https issuer and keys", mod: func(*ownerauth.Config) {}},
		{name: "jwks on 127.0.0.1", mod: func(c *ownerauth.Config) { c.JWKSURL = "http://127.0.0.1:5556/keys" }, refused: "owner-jwks-url must be https in the agent's pod"},
		{name: "jwks on localhost", mod: func(c *ownerauth.Config) { c.JWKSURL = "http://localhost:5556/keys" }, refused: "owner-jwks-url must be https in the agent's pod"},
		{name: "jwks on ::1", mod: func(c *ownerauth.Config) { c.JWKSURL = "http://[::1]:5556/keys" }, refused: "owner-jwks-url must be https in the agent's pod"},
		{name: "issuer on localhost", mod: func(c *ownerauth.Config) { c.Issuer = "http://localhost:5556/realms/cs" }, refused: "owner-issuer must be https in the agent's pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("outside the agent's pod Validate() = %v, want nil", err)
			}
			c.InAgentPod = true
			err := c.Validate()
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("in the agent's pod Validate() = %v, want nil", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("in the agent's pod Validate() = %v, want an error containing %q", err, tc.refused)
			}
		})
	}
}

// In the agent's pod an https JWKS URL that redirects to plain http on
// loopback (which the agent could be serving) is not followed; outside
// the pod it is, as before.
func TestInAgentPodJWKSRedirectToPlainHTTPRefused(t *testing.T) {
	_, ec, _, _ := testKeys(t)
	body := jwks(t, ec)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	t.Cleanup(plain.Close)
	redirector := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/keys", http.StatusFound))
	t.Cleanup(redirector.Close)

	for _, inPod := range []bool{false, true} {
		clk := newClock()
		cfg := ownerauth.Config{Issuer: testIssuer, Audience: testAudience, AllowedSubjects: testOwners, Now: clk.Now,
			JWKSURL: redirector.URL + "/keys", HTTPClient: redirector.Client(), InAgentPod: inPod}
		a, err := ownerauth.New(cfg, &fakeTokens{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Authenticate(context.Background(), "Bearer "+sign(t, ec, claimsAt(clk.Now(), "alice")))
		switch {
		case !inPod && err != nil:
			t.Errorf("outside the agent's pod: Authenticate = %v, want the redirected keys to verify", err)
		case inPod && (err == nil || !strings.Contains(err.Error(), "not https")):
			t.Errorf("in the agent's pod: Authenticate = %v, want the redirect to plain http refused", err)
		}
	}
}
