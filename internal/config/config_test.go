package config

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/countersign/countersign/internal/audit"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("grpc-addr: 127.0.0.1:1111\nhttp-addr: 127.0.0.1:2222\nlog-level: warn\ndatabase-url: postgres://file/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg.BindServe(fs)
	if err := fs.Parse([]string{"--config", file, "--grpc-addr", "127.0.0.1:3333"}); err != nil {
		t.Fatal(err)
	}
	err := Resolve(fs, env(map[string]string{
		"COUNTERSIGN_GRPC_ADDR": "127.0.0.1:4444", // loses to the flag
		"COUNTERSIGN_HTTP_ADDR": "127.0.0.1:5555", // beats the file
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GRPCAddr != "127.0.0.1:3333" {
		t.Errorf("grpc-addr = %q, flag must win", cfg.GRPCAddr)
	}
	if cfg.HTTPAddr != "127.0.0.1:5555" {
		t.Errorf("http-addr = %q, env must beat the file", cfg.HTTPAddr)
	}
	if cfg.LogLevel != "warn" || cfg.DatabaseURL != "postgres://file/db" {
		t.Errorf("file values not applied: %+v", cfg)
	}
	if cfg.ShutdownTimeout != 15*time.Second {
		t.Errorf("default lost: %s", cfg.ShutdownTimeout)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}

func TestResolveErrorsNameTheSetting(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"bad env duration", "", map[string]string{"COUNTERSIGN_SHUTDOWN_TIMEOUT": "soon"}, "COUNTERSIGN_SHUTDOWN_TIMEOUT"},
		{"bad env int", "", map[string]string{"COUNTERSIGN_DB_MAX_CONNS": "many"}, "COUNTERSIGN_DB_MAX_CONNS"},
		{"unknown file key", "grpc_port: 1\n", nil, `unknown setting "grpc_port"`},
		{"bad file value", "readiness-interval: often\n", nil, "readiness-interval"},
		{"file not yaml", "[", nil, "config file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Defaults()
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			cfg.BindServe(fs)
			args := []string{}
			if tc.file != "" {
				p := filepath.Join(t.TempDir(), "c.yaml")
				if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", p)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			err := Resolve(fs, env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Resolve error = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Defaults()
	ok.DatabaseURL = "postgres://u@127.0.0.1/db"
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string // empty: valid
	}{
		{"defaults with url", func(*Config) {}, ""},
		{"missing url", func(c *Config) { c.DatabaseURL = "" }, "database-url (COUNTERSIGN_DATABASE_URL) is required"},
		{"mysql url", func(c *Config) { c.DatabaseURL = "mysql://x" }, "must be a postgres:// URL"},
		{"bad grpc addr", func(c *Config) { c.GRPCAddr = "9191" }, "grpc-addr (COUNTERSIGN_GRPC_ADDR) must be host:port"},
		{"same addrs", func(c *Config) { c.HTTPAddr = c.GRPCAddr }, "must differ"},
		{"bad level", func(c *Config) { c.LogLevel = "loud" }, "log-level"},
		{"bad format", func(c *Config) { c.LogFormat = "xml" }, "log-format"},
		{"zero shutdown", func(c *Config) { c.ShutdownTimeout = 0 }, "shutdown-timeout"},
		{"fast readiness", func(c *Config) { c.ReadinessInterval = time.Millisecond }, "readiness-interval"},
		{"pool too big", func(c *Config) { c.DBMaxConns = 5000 }, "db-max-conns"},
		{"short claim", func(c *Config) { c.ReconcileClaimTTL = 10 * time.Millisecond }, "reconcile-claim-ttl (COUNTERSIGN_RECONCILE_CLAIM_TTL) must be at least 1s"},
		{"no pending approvals", func(c *Config) { c.MaxPendingApprovals = 0 }, "max-pending-approvals (COUNTERSIGN_MAX_PENDING_APPROVALS) must be between 1 and 100000, got 0"},
		{"webhook networks", func(c *Config) { c.WebhookAllowNetworks = " 10.20.0.0/16, 127.0.0.1 ,fd00::/8" }, ""},
		// The per-agent limit on rail reads.
		{"agent rail reads off", func(c *Config) { c.AgentRailReadRate, c.AgentRailReadBurst = 0, 0 }, ""},
		{"negative agent rail read rate", func(c *Config) { c.AgentRailReadRate = -1 },
			"agent-rail-read-rate (COUNTERSIGN_AGENT_RAIL_READ_RATE) must be a number of reads a second, 0 or more (0 turns the limit off), got -1"},
		{"agent rail read rate not a number", func(c *Config) { c.AgentRailReadRate = math.NaN() }, "agent-rail-read-rate (COUNTERSIGN_AGENT_RAIL_READ_RATE) must be a number"},
		{"negative agent rail read burst", func(c *Config) { c.AgentRailReadBurst = -5 },
			"agent-rail-read-burst (COUNTERSIGN_AGENT_RAIL_READ_BURST) must not be negative, got -5"},
		{"agent rail read rate without a burst", func(c *Config) { c.AgentRailReadBurst = 0 },
			"agent-rail-read-burst (COUNTERSIGN_AGENT_RAIL_READ_BURST) must be at least 1 while agent-rail-read-rate (COUNTERSIGN_AGENT_RAIL_READ_RATE) is set"},
		// The per-agent limit on decisions.
		{"agent decisions off", func(c *Config) { c.AgentDecisionRate, c.AgentDecisionBurst = 0, 0 }, ""},
		{"agent decision rate infinite", func(c *Config) { c.AgentDecisionRate = math.Inf(1) },
			"agent-decision-rate (COUNTERSIGN_AGENT_DECISION_RATE) must be a number of decisions a second, 0 or more (0 turns the limit off), got +Inf"},
		{"negative agent decision burst", func(c *Config) { c.AgentDecisionBurst = -1 },
			"agent-decision-burst (COUNTERSIGN_AGENT_DECISION_BURST) must not be negative, got -1"},
		{"agent decision rate without a burst", func(c *Config) { c.AgentDecisionBurst = 0 },
			"agent-decision-burst (COUNTERSIGN_AGENT_DECISION_BURST) must be at least 1 while agent-decision-rate (COUNTERSIGN_AGENT_DECISION_RATE) is set"},
		// The Envoy-facing listener: its ALLOW carries the rail key.
		{"default envoy socket", func(c *Config) {
			if c.EnvoyAddr != "unix:"+DefaultEnvoySocket {
				t.Errorf("default envoy-addr = %q, want the socket", c.EnvoyAddr)
			}
		}, ""},
		{"envoy on loopback TCP is refused", func(c *Config) { c.EnvoyAddr = "127.0.0.1:9192" }, "without mutual TLS: an ALLOW answer carries the rail key"},
		{"envoy on all interfaces is refused", func(c *Config) { c.EnvoyAddr = ":9192" }, "--" + UnsafeEnvoyTCPFlag + " overrides"},
		{"envoy TCP with the loud override", func(c *Config) { c.EnvoyAddr = "127.0.0.1:9192"; c.UnsafeEnvoyTCP = true }, ""},
		{"envoy TCP with mutual TLS", func(c *Config) {
			c.EnvoyAddr, c.EnvoyTLSCert, c.EnvoyTLSKey, c.EnvoyClientCA = "10.0.0.5:9192", "/tls/crt", "/tls/key", "/tls/ca"
		}, ""},
		{"envoy TCP with half of TLS", func(c *Config) { c.EnvoyAddr, c.EnvoyTLSCert = "10.0.0.5:9192", "/tls/crt" }, "needs all of envoy-tls-cert, envoy-tls-key and envoy-client-ca"},
		{"envoy TLS on a socket", func(c *Config) { c.EnvoyTLSCert = "/tls/crt" }, "are for a TCP"},
		{"envoy on the gRPC API's address", func(c *Config) { c.EnvoyAddr, c.UnsafeEnvoyTCP = c.GRPCAddr, true }, "must differ from grpc-addr"},
		{"envoy relative socket", func(c *Config) { c.EnvoyAddr = "unix:envoy.sock" }, "must be absolute"},
		{"envoy socket path too long", func(c *Config) { c.EnvoyAddr = "unix:/" + strings.Repeat("d", 120) }, "the system allows about 104"},
		{"bad webhook network", func(c *Config) { c.WebhookAllowNetworks = "10.20.0.0/16,intranet" }, `webhook-allow-networks (COUNTERSIGN_WEBHOOK_ALLOW_NETWORKS): "intranet" is neither`},
		{"trusted proxies", func(c *Config) { c.TrustedProxies = "10.0.0.0/8, 192.0.2.7" }, ""},
		{"prune hourly by default", func(c *Config) {
			if c.PruneInterval != time.Hour {
				t.Errorf("default prune-interval = %s, want 1h", c.PruneInterval)
			}
		}, ""},
		{"prune off", func(c *Config) { c.PruneInterval = 0 }, ""},
		{"negative prune interval", func(c *Config) { c.PruneInterval = -time.Minute }, "prune-interval (COUNTERSIGN_PRUNE_INTERVAL) must not be negative"},
		{"audit seal interval too short", func(c *Config) { c.AuditSealInterval = time.Millisecond }, "audit-seal-interval (COUNTERSIGN_AUDIT_SEAL_INTERVAL) must be between 10ms and 1h"},
		{"audit signing key missing", func(c *Config) { c.AuditSigningKey = "/nonexistent/audit.key" }, "audit-signing-key (COUNTERSIGN_AUDIT_SIGNING_KEY): audit signing key: open /nonexistent/audit.key"},
		{"audit signing key is a verifier key", func(c *Config) {
			dir := t.TempDir()
			_, pub, _, err := audit.WriteKeyPair(dir, "cfg.test")
			if err != nil {
				t.Fatal(err)
			}
			c.AuditSigningKey = pub
		}, "not a note signer key"},
		{"audit signing key", func(c *Config) {
			key, _, _, err := audit.WriteKeyPair(t.TempDir(), "cfg.test")
			if err != nil {
				t.Fatal(err)
			}
			c.AuditSigningKey = key
		}, ""},
		{"bad trusted proxy", func(c *Config) { c.TrustedProxies = "10.0.0.0/8,lb.internal" }, `trusted-proxies (COUNTERSIGN_TRUSTED_PROXIES): "lb.internal" is neither`},
		// The owner console.
		{"console session default 8h", func(c *Config) {
			if c.ConsoleSessionTTL != 8*time.Hour {
				t.Errorf("default console-session-ttl = %s", c.ConsoleSessionTTL)
			}
		}, ""},
		{"console session over 24h", func(c *Config) { c.ConsoleSessionTTL = 25 * time.Hour }, "console-session-ttl (COUNTERSIGN_CONSOLE_SESSION_TTL) must be between 1m and 24h"},
		{"console session too short", func(c *Config) { c.ConsoleSessionTTL = time.Second }, "console-session-ttl (COUNTERSIGN_CONSOLE_SESSION_TTL) must be between 1m and 24h"},
		{"console url https", func(c *Config) { c.ConsoleURL = "https://countersign.example.com" }, ""},
		{"console url on localhost", func(c *Config) { c.ConsoleURL = "http://localhost:8080" }, ""},
		{"console url plain http", func(c *Config) { c.ConsoleURL = "http://countersign.example.com" }, "console-url must be https (plain http only for localhost or 127.0.0.1)"},
		{"console url with a path", func(c *Config) { c.ConsoleURL = "https://countersign.example.com/console" }, "console-url must be scheme://host[:port] only"},
		{"client id without issuer", func(c *Config) { c.OwnerClientID, c.ConsoleURL = "console", "https://cs.example.com" }, "owner-client-id (COUNTERSIGN_OWNER_CLIENT_ID) needs owner-issuer"},
		{"client secret without client id", func(c *Config) { c.OwnerClientSecretFile = "/run/secret" }, "owner-client-secret-file (COUNTERSIGN_OWNER_CLIENT_SECRET_FILE) is set but owner-client-id is not"},
		{"token url without client id", func(c *Config) { c.OwnerTokenURL = "https://id.example.com/token" }, "owner-token-url (COUNTERSIGN_OWNER_TOKEN_URL) is set but owner-client-id is not"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOwnerOIDCNeedsAnAllowlist(t *testing.T) {
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	valid := func() Config {
		c := Defaults()
		c.DatabaseURL = "postgres://x/db"
		c.OwnerIssuer, c.OwnerAudience, c.OwnerJWKSFile = "https://id.example.test", "countersign", jwksFile
		return c
	}
	c := valid()
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "owner-allowed-subjects and/or owner-allowed-groups") {
		t.Fatalf("an issuer without an allowlist must not start: %v", err)
	}
	c.OwnerAllowedSubjects = " alice , bob@example.test,,"
	if err := c.Validate(); err != nil {
		t.Fatalf("allowlisted OIDC refused: %v", err)
	}
	if got := c.OwnerAuth().AllowedSubjects; strings.Join(got, "|") != "alice|bob@example.test" {
		t.Fatalf("allowed subjects = %q", got)
	}
	c = valid()
	c.OwnerAllowedGroups = "payments-owners"
	if err := c.Validate(); err != nil {
		t.Fatalf("group-allowlisted OIDC refused: %v", err)
	}
	if oa := c.OwnerAuth(); oa.GroupsClaim != "groups" || len(oa.AllowedGroups) != 1 {
		t.Fatalf("owner auth = %+v", oa)
	}
}

// TestConsoleOIDCSettings: the console's OIDC sign-in needs the owner
// issuer, console-url and a readable client secret file when one is named.
func TestConsoleOIDCSettings(t *testing.T) {
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	valid := func() Config {
		c := Defaults()
		c.DatabaseURL = "postgres://x/db"
		c.OwnerIssuer, c.OwnerAudience, c.OwnerJWKSFile, c.OwnerAllowedSubjects = "https://id.example.test", "countersign", jwksFile, "alice"
		c.OwnerClientID, c.ConsoleURL = "countersign-console", "https://countersign.example.test"
		return c
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"discovery", func(*Config) {}, ""},
		{"explicit endpoints", func(c *Config) { c.OwnerAuthorizationURL, c.OwnerTokenURL = "https://id/auth", "https://id/token" }, ""},
		{"one endpoint", func(c *Config) { c.OwnerTokenURL = "https://id/token" }, "owner-authorization-url and owner-token-url go together"},
		{"no console url", func(c *Config) { c.ConsoleURL = "" }, "owner-client-id needs console-url (COUNTERSIGN_CONSOLE_URL)"},
		{"client secret", func(c *Config) { c.OwnerClientSecretFile = secretFile }, ""},
		{"missing client secret", func(c *Config) { c.OwnerClientSecretFile = "/nonexistent/secret" }, "owner-client-secret-file (COUNTERSIGN_OWNER_CLIENT_SECRET_FILE): open /nonexistent/secret"},
		{"empty client secret", func(c *Config) { c.OwnerClientSecretFile = emptyFile }, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	c := valid()
	c.OwnerClientSecretFile = secretFile
	if s, err := c.OwnerClientSecret(); err != nil || s != "s3cret" {
		t.Fatalf("OwnerClientSecret() = %q, %v", s, err)
	}
}

func TestOwnerAllowlistFromAConfigFileList(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("owner-allowed-subjects: [alice, bob]\nowner-allowed-groups: payments-owners\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg.BindServe(fs)
	if err := fs.Parse([]string{"--config", file}); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(fs, env(nil)); err != nil {
		t.Fatal(err)
	}
	if cfg.OwnerAllowedSubjects != "alice,bob" || cfg.OwnerAllowedGroups != "payments-owners" {
		t.Fatalf("allowlist from file = %q / %q", cfg.OwnerAllowedSubjects, cfg.OwnerAllowedGroups)
	}
}

// TestDecisionLogIsOnUnlessTurnedOff: the decision log is on by default,
// and COUNTERSIGN_DECISION_LOG (or --decision-log) turns it off.
func TestDecisionLogIsOnUnlessTurnedOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{"default", nil, nil, true},
		{"environment", nil, map[string]string{"COUNTERSIGN_DECISION_LOG": "false"}, false},
		{"flag", []string{"--decision-log=false"}, map[string]string{"COUNTERSIGN_DECISION_LOG": "true"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Defaults()
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			cfg.BindServe(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := Resolve(fs, env(tc.env)); err != nil {
				t.Fatal(err)
			}
			if cfg.DecisionLog != tc.want {
				t.Fatalf("DecisionLog = %v, want %v", cfg.DecisionLog, tc.want)
			}
		})
	}
}

// TestAgentRailReadLimit: the limit on the rail reads one agent's requests
// cause is on by default (20 a second, 40 at once), set by
// COUNTERSIGN_AGENT_RAIL_READ_RATE/_BURST (or the flags), turned off by a
// rate of 0, and a value that is not a number is refused naming the
// variable.
func TestAgentRailReadLimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		rate      float64
		burst     int
		resolve   string // a Resolve error naming this, or "" for none
		validates string // a Validate error naming this, or "" for valid
	}{
		{name: "default", rate: 20, burst: 40},
		{name: "environment", env: map[string]string{"COUNTERSIGN_AGENT_RAIL_READ_RATE": "2.5", "COUNTERSIGN_AGENT_RAIL_READ_BURST": "5"}, rate: 2.5, burst: 5},
		{name: "turned off", env: map[string]string{"COUNTERSIGN_AGENT_RAIL_READ_RATE": "0"}, rate: 0, burst: 40},
		{name: "flag beats environment", args: []string{"--agent-rail-read-rate=100"}, env: map[string]string{"COUNTERSIGN_AGENT_RAIL_READ_RATE": "1"}, rate: 100, burst: 40},
		{name: "negative rate", env: map[string]string{"COUNTERSIGN_AGENT_RAIL_READ_RATE": "-1"}, rate: -1, burst: 40,
			validates: "agent-rail-read-rate (COUNTERSIGN_AGENT_RAIL_READ_RATE) must be a number of reads a second, 0 or more"},
		{name: "negative burst", env: map[string]string{"COUNTERSIGN_AGENT_RAIL_READ_BURST": "-1"}, rate: 20, burst: -1,
			validates: "agent-rail-read-burst (COUNTERSIGN_AGENT_RAIL_READ_BURST) must not be negative"},
		{name: "rate not a number", env: map[string]string{"COUNTERSIGN_AGENT_RAIL_READ_RATE": "lots"}, resolve: "COUNTERSIGN_AGENT_RAIL_READ_RATE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Defaults()
			cfg.DatabaseURL = "postgres://u@127.0.0.1/db"
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			cfg.BindServe(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := Resolve(fs, env(tc.env))
			if tc.resolve != "" {
				if err == nil || !strings.Contains(err.Error(), tc.resolve) {
					t.Fatalf("Resolve error = %v, want mention of %q", err, tc.resolve)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.AgentRailReadRate != tc.rate || cfg.AgentRailReadBurst != tc.burst {
				t.Fatalf("rate, burst = %v, %d; want %v, %d", cfg.AgentRailReadRate, cfg.AgentRailReadBurst, tc.rate, tc.burst)
			}
			err = cfg.Validate()
			switch {
			case tc.validates == "" && err != nil:
				t.Fatalf("Validate() = %v, want valid", err)
			case tc.validates != "" && (err == nil || !strings.Contains(err.Error(), tc.validates)):
				t.Fatalf("Validate() = %v, want %q", err, tc.validates)
			}
		})
	}
}
