package config

import (
	"strings"
	"testing"
)

// In the agent's pod the owner issuer's URLs must be https, even to
// loopback, which the agent shares; outside it plain http to loopback
// stays allowed (a local issuer proxy).
func TestInAgentPodOwnerIssuerURLs(t *testing.T) {
	clearPGEnv(t)
	for _, tc := range []struct {
		name    string
		set     func(*Config)
		refused []string // the flags named in the in-pod error; none: accepted
	}{
		{name: "all https", set: func(*Config) {}},
		{name: "jwks on 127.0.0.1", set: func(c *Config) { c.OwnerJWKSURL = "http://127.0.0.1:5556/keys" }, refused: []string{"owner-jwks-url"}},
		{name: "jwks on localhost", set: func(c *Config) { c.OwnerJWKSURL = "http://localhost:5556/keys" }, refused: []string{"owner-jwks-url"}},
		{name: "issuer on localhost", set: func(c *Config) { c.OwnerIssuer = "http://localhost:5556" }, refused: []string{"owner-issuer"}},
		{name: "console endpoints on localhost", set: func(c *Config) {
			c.OwnerAuthorizationURL, c.OwnerTokenURL = "http://localhost:5556/auth", "http://127.0.0.1:5556/token"
		}, refused: []string{"owner-authorization-url", "owner-token-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.DatabaseURL = "postgres://cs@db.example:5432/cs?sslmode=verify-full"
			c.OwnerIssuer, c.OwnerAudience, c.OwnerAllowedSubjects = "https://id.example", "countersign", "alice"
			c.OwnerJWKSURL = "https://id.example/keys"
			c.OwnerClientID, c.ConsoleURL = "countersign", "https://console.example"
			c.OwnerAuthorizationURL, c.OwnerTokenURL = "https://id.example/auth", "https://id.example/token"
			tc.set(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("outside the agent's pod Validate() = %v, want nil", err)
			}
			c.InAgentPod = true
			err := c.Validate()
			if len(tc.refused) == 0 {
				if err != nil {
					t.Errorf("in the agent's pod Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("in the agent's pod Validate() = nil, want %v refused", tc.refused)
			}
			for _, f := range tc.refused {
				if !strings.Contains(err.Error(), f+" must be https in the agent's pod") {
					t.Errorf("in the agent's pod Validate() = %v, want %s refused", err, f)
				}
			}
		})
	}
}
