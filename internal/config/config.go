// Package config builds Countersign's configuration: defaults, then an
// optional YAML file, then COUNTERSIGN_* environment variables, then flags
// (highest precedence), validated with messages that name the bad setting.
package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/mod/sumdb/note"
	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ownerauth"
)

// DefaultEnvoySocket is where the Envoy-facing listener is by default: a
// directory meant to be a volume only the Envoy and Countersign containers
// mount (the chart and the injector mount one there).
const DefaultEnvoySocket = "/var/run/countersign/envoy.sock"

// UnsafeEnvoyTCPFlag is the override that lets the Envoy-facing listener be
// plain TCP; its name says what it risks.
const UnsafeEnvoyTCPFlag = "unsafe-envoy-tcp-exposes-rail-keys"

// InAgentPodFlag says `countersign serve` runs in the agent's pod; the
// injector sets it (as COUNTERSIGN_IN_AGENT_POD) on every countersign
// sidecar it builds.
const InAgentPodFlag = "in-agent-pod"

// EnvPrefix is the prefix of every environment variable Countersign reads.
const EnvPrefix = "COUNTERSIGN_"

// Config is everything `countersign serve` needs.
type Config struct {
	ConfigFile string
	// GRPCAddr serves countersign.v1 (decision and owner APIs, each caller
	// authenticated), health and reflection.
	GRPCAddr string
	// EnvoyAddr serves Envoy's ext_authz and ext_proc, whose ALLOW answer
	// carries the rail key: a Unix socket on a volume only Envoy and
	// Countersign mount, or TCP with mutual TLS (EnvoyTLS*), or TCP with
	// UnsafeEnvoyTCP where no agent can reach the address.
	EnvoyAddr                                string
	EnvoyTLSCert, EnvoyTLSKey, EnvoyClientCA string
	// GRPCReflection serves gRPC server reflection on GRPCAddr: the one
	// service there besides health that answers without a credential.
	GRPCReflection bool
	// UnsafeEnvoyTCP lets EnvoyAddr be plain TCP. Anything that can connect
	// to it can ask for an ALLOW and read the rail key it carries.
	UnsafeEnvoyTCP bool
	// InAgentPod says this process runs in the agent's pod (a sidecar the
	// injector adds), so the agent shares its loopback and its /etc/hosts:
	// the ledger must be reached over verify-full TLS (validateInAgentPod)
	// and every rail URL over https (rails.InAgentPod).
	InAgentPod        bool
	HTTPAddr          string
	DatabaseURL       string
	DBMaxConns        int32
	DBPooler          string // what DatabaseURL points at: "none" or "pgbouncer" (transaction pooling)
	LogLevel          string
	LogFormat         string
	ShutdownTimeout   time.Duration
	ReadinessInterval time.Duration
	// RailsFile names the rail accounts file (see internal/rails).
	RailsFile string
	// LeaseOwner names this process in attempt and reconcile leases.
	LeaseOwner string
	// LeaseTTL bounds how long an attempt may stay IN_FLIGHT unanswered.
	LeaseTTL time.Duration
	// RailSettle is how long after an allowed request leaves the rail may
	// still apply it: at least the rail route's timeout in Envoy (60 s in
	// the shipped configs) plus what the rail takes after its client gave
	// up. No listing before then proves the attempt absent.
	RailSettle time.Duration
	// ReconcileDelay is the minimum wait before the first reconciliation
	// query (the rails have no read-your-writes).
	ReconcileDelay time.Duration
	// MaxPendingApprovals bounds the requests of one agent waiting for its
	// owner's approval: past it, a request the gates would hold is refused.
	MaxPendingApprovals int
	// AgentRailReadRate and AgentRailReadBurst bound the rail reads one
	// agent's requests cause on one rail account (resolving a referent,
	// reading an MCP tool's description, confirming a reported "applied"):
	// a token bucket of AgentRailReadBurst reads refilled at
	// AgentRailReadRate a second, per agent and account, in this process.
	// A rate of 0 turns the limit off.
	AgentRailReadRate  float64
	AgentRailReadBurst int
	// AgentDecisionRate and AgentDecisionBurst bound the decisions one
	// agent may ask for (ext_authz checks and native Decide calls, whatever
	// their verdict): a token bucket of AgentDecisionBurst decisions
	// refilled at AgentDecisionRate a second, per agent, in this process.
	// A rate of 0 turns the limit off.
	AgentDecisionRate  float64
	AgentDecisionBurst int
	// ReconcileInterval is how often the reconciler looks for work; 0 turns
	// the in-process reconciler off.
	ReconcileInterval time.Duration
	// ReconcileMaxAttempts quarantines an intent after this many
	// inconclusive reconciliations.
	ReconcileMaxAttempts int
	// ReconcileClaimTTL bounds one intent's reconciliation (its listing);
	// a reconciler that dies holds its claims this long.
	ReconcileClaimTTL time.Duration
	// ExtProcInPath says Envoy runs the ext_proc filter after ext_authz.
	ExtProcInPath bool
	// DecisionLog writes one structured log line per decision (verdict,
	// reason, gates, agent, intent, trace id; never a secret).
	DecisionLog bool
	// MaxRequestBytes is Envoy's ext_authz with_request_body.max_request_bytes:
	// a body that reaches it without a declared length matching what was
	// seen cannot be shown whole, and is refused.
	MaxRequestBytes int
	// OutboxInterval is how often the webhook dispatcher looks for work;
	// 0 turns it off.
	OutboxInterval time.Duration
	// WebhookAllowNetworks lists (comma-separated CIDR prefixes or
	// addresses) the non-public networks webhooks may reach; every other
	// special-purpose address (loopback, private, link-local, …) is refused.
	WebhookAllowNetworks string
	// Owner authentication (OIDC) and quotas.
	OwnerIssuer, OwnerAudience, OwnerJWKSURL, OwnerJWKSFile, OwnerSubjectClaim string
	// OwnerAllowedSubjects and OwnerAllowedGroups (comma-separated) are the
	// OIDC owner allowlist; OwnerGroupsClaim names the claim the groups are
	// read from. With an issuer set, the allowlist must not be empty.
	OwnerAllowedSubjects, OwnerAllowedGroups, OwnerGroupsClaim string
	OwnerQuotaRate                                             float64
	OwnerQuotaBurst                                            int
	AuthFailureRate                                            float64
	AuthFailureBurst                                           int
	// AuditSigningKey names the note signer key file the sequencer signs
	// audit checkpoints with; empty: this process does not seal.
	AuditSigningKey string
	// AuditVerifierKey names the note verifier key file the owner API's
	// VerifyAudit trusts (empty: the signing key's own verifier, and with
	// neither VerifyAudit refuses), so a replica that does not seal can
	// still verify.
	AuditVerifierKey string
	// AuditSealInterval is how often the sequencer seals new audit records.
	AuditSealInterval time.Duration
	// PruneInterval is how often the ledger forgets what nothing can use
	// any more (ledger.Prune: window counters past every window, long
	// expired owner sessions); 0 turns it off.
	PruneInterval time.Duration
	// TrustedProxies lists (comma-separated CIDR prefixes or addresses)
	// the proxies whose X-Forwarded-For is believed when quotas name a
	// caller's source; empty (the default): no forwarding header is.
	TrustedProxies string
	// ConsoleSessionTTL is how long an owner console session lives (at
	// most 24h); ConsoleURL is the console's external base URL, the base
	// of the OIDC redirect_uri.
	ConsoleSessionTTL time.Duration
	ConsoleURL        string
	// OwnerClientID turns on the console's OIDC sign-in (authorization
	// code + PKCE) with the owner issuer; OwnerClientSecretFile holds a
	// confidential client's secret. OwnerAuthorizationURL and
	// OwnerTokenURL name the issuer's endpoints instead of discovery.
	OwnerClientID, OwnerClientSecretFile string
	OwnerAuthorizationURL, OwnerTokenURL string
}

// The default limit on the rail reads one agent's requests cause on one
// rail account. A rail account's rate limit is account-wide and shared with
// the owner's own systems (checkout, the reconciler, other agents): Stripe's
// live mode allows about 100 requests a second, reads included. 20 a second
// is a fifth of that, so one agent cannot take the account's limit from
// the rest, and is far above what an agent a person supervises sends; a
// burst of 40 lets a batch through without a refusal. Stripe's test mode
// allows about 25 a second: lower it there, or where many agents (or many
// processes: the buckets are per process) share one account.
const (
	DefaultAgentRailReadRate  = 20
	DefaultAgentRailReadBurst = 40
)

// DefaultAgentDecisionRate and DefaultAgentDecisionBurst bound the
// decisions one agent may ask for. Every decision costs a write to the
// ledger every agent of the deployment shares (a refusal its decision
// record, an ALLOW its intent, hold and attempt), so one agent that asks
// as fast as it can would take the ledger's throughput and disk from the
// rest. 20 a second matches the rail reads an agent's new requests may
// cause (an agent cannot get more refunds through than that anyway) and
// is far above what an agent a person supervises sends; a burst of 40 lets
// a batch through.
const (
	DefaultAgentDecisionRate  = 20
	DefaultAgentDecisionBurst = 40
)

// DefaultRailSettle is how long after an allowed request leaves the rail
// may still apply it, by default: the shipped Envoy routes give a rail
// call 60 s (envoy/egress.yaml, the chart's egress.upstream.timeout), and
// a rail goes on with a request whose client gave up (Stripe finishes
// what it started); another 60 s covers that. An ambiguous outcome is
// proven absent no sooner: a slower answer costs a later reconciliation,
// a listing that comes too early pays twice.
const DefaultRailSettle = 2 * time.Minute

// Defaults are the values a setting has when nothing sets it.
func Defaults() Config {
	return Config{
		GRPCAddr:             "127.0.0.1:9191",
		EnvoyAddr:            "unix:" + DefaultEnvoySocket,
		HTTPAddr:             "127.0.0.1:8080",
		DBMaxConns:           32,
		DBPooler:             "none",
		LogLevel:             "info",
		LogFormat:            "json",
		ShutdownTimeout:      15 * time.Second,
		ReadinessInterval:    time.Second,
		LeaseTTL:             30 * time.Second,
		ReconcileDelay:       2 * time.Second,
		RailSettle:           DefaultRailSettle,
		MaxPendingApprovals:  50,
		ReconcileInterval:    time.Second,
		ReconcileMaxAttempts: 6,
		ReconcileClaimTTL:    2 * time.Minute,
		ExtProcInPath:        true,
		DecisionLog:          true,
		MaxRequestBytes:      65536,
		OutboxInterval:       time.Second,
		AuditSealInterval:    time.Second,
		PruneInterval:        time.Hour,
		OwnerSubjectClaim:    "sub",
		OwnerGroupsClaim:     ownerauth.DefaultGroupsClaim,
		OwnerQuotaRate:       10,
		OwnerQuotaBurst:      50,
		AuthFailureRate:      0.1,
		AuthFailureBurst:     10,
		ConsoleSessionTTL:    8 * time.Hour,
		AgentRailReadRate:    DefaultAgentRailReadRate,
		AgentRailReadBurst:   DefaultAgentRailReadBurst,
		AgentDecisionRate:    DefaultAgentDecisionRate,
		AgentDecisionBurst:   DefaultAgentDecisionBurst,
	}
}

// BindDatabase registers the flags every ledger-using command shares.
func (c *Config) BindDatabase(fs *pflag.FlagSet) {
	fs.StringVar(&c.ConfigFile, "config", c.ConfigFile, "optional YAML file of settings keyed by flag name (lowest precedence after defaults)")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "PostgreSQL URL of the ledger, e.g. postgres://user@127.0.0.1:5432/countersign")
	fs.Int32Var(&c.DBMaxConns, "db-max-conns", c.DBMaxConns, fmt.Sprintf("maximum ledger connections in the pool (default %d with --db-pooler=pgbouncer)", PooledDBMaxConns))
	fs.StringVar(&c.DBPooler, "db-pooler", c.DBPooler, "what database-url points at: none (PostgreSQL) or pgbouncer (PgBouncer in transaction pooling mode)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: json or text")
}

// BindEngine registers the flags of commands that talk to rails.
func (c *Config) BindEngine(fs *pflag.FlagSet) {
	fs.StringVar(&c.RailsFile, "rails-file", c.RailsFile, "YAML file of rail accounts (account, rail, hosts, base_url, key_file)")
	fs.StringVar(&c.LeaseOwner, "lease-owner", c.LeaseOwner, "name of this process in attempt and reconcile leases (default: host name and pid)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "how long an allowed attempt may stay unanswered before it is reconciled")
	fs.DurationVar(&c.ReconcileDelay, "reconcile-delay", c.ReconcileDelay, "minimum wait before the first reconciliation query of an ambiguous attempt")
	fs.DurationVar(&c.RailSettle, "rail-settle-time", c.RailSettle, "how long after an allowed request leaves the rail may still apply it (at least the rail route's timeout in Envoy, plus what the rail takes after its client gave up): no reconciliation listing before then proves it absent")
	fs.IntVar(&c.MaxPendingApprovals, "max-pending-approvals", c.MaxPendingApprovals, "requests of one agent that may wait for the owner's approval at once; past it, a request that would be held is refused")
	fs.IntVar(&c.ReconcileMaxAttempts, "reconcile-max-attempts", c.ReconcileMaxAttempts, "inconclusive reconciliations before an intent is quarantined")
	fs.DurationVar(&c.ReconcileClaimTTL, "reconcile-claim-ttl", c.ReconcileClaimTTL, "how long one intent's reconciliation (its listing to the last page) may take; a reconciler that dies holds its claims this long")
	fs.BoolVar(&c.ExtProcInPath, "ext-proc-in-path", c.ExtProcInPath, "Envoy runs Countersign's ext_proc filter (failing closed) after ext_authz; false for ext_authz-only deployments such as Istio CUSTOM")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "Envoy ext_authz with_request_body.max_request_bytes (keep them equal): a body that reaches it and whose declared length does not prove it whole is refused")
}

// BindServe registers the flags of a serving command.
func (c *Config) BindServe(fs *pflag.FlagSet) {
	c.BindDatabase(fs)
	c.BindEngine(fs)
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", c.ReconcileInterval, "how often the in-process reconciler looks for work (0 turns it off)")
	fs.BoolVar(&c.DecisionLog, "decision-log", c.DecisionLog, "log one JSON line per decision (verdict, reason code, gate results, agent, rail account, intent, amount, trace and request ids; never a credential, key or token); false turns it off")
	fs.DurationVar(&c.OutboxInterval, "outbox-interval", c.OutboxInterval, "how often the webhook dispatcher delivers events (0 turns it off)")
	fs.StringVar(&c.WebhookAllowNetworks, "webhook-allow-networks", c.WebhookAllowNetworks, "comma-separated CIDR prefixes of non-public networks webhooks may reach (loopback, private and link-local addresses are refused otherwise)")
	fs.StringVar(&c.AuditSigningKey, "audit-signing-key", c.AuditSigningKey, "file holding the audit log's note signer key (countersign audit keygen); without it this process does not seal audit records")
	fs.StringVar(&c.AuditVerifierKey, "audit-verifier-key", c.AuditVerifierKey, "file holding the audit log's note verifier key (countersign audit keygen's NAME.pub) that the owner API's VerifyAudit checks signatures with (default: the verifier of audit-signing-key; with neither, VerifyAudit is refused)")
	fs.DurationVar(&c.PruneInterval, "prune-interval", c.PruneInterval, "how often the ledger deletes window counters no window can count and owner sessions expired over a day (0 turns it off)")
	fs.DurationVar(&c.AuditSealInterval, "audit-seal-interval", c.AuditSealInterval, "how often the sequencer seals new audit records into the signed log (with audit-signing-key)")
	fs.StringVar(&c.OwnerIssuer, "owner-issuer", c.OwnerIssuer, "OIDC issuer of owner JWTs (exact iss); empty: OIDC off, static owner tokens only")
	fs.StringVar(&c.OwnerAudience, "owner-audience", c.OwnerAudience, "audience an owner JWT must list in aud")
	fs.StringVar(&c.OwnerJWKSURL, "owner-jwks-url", c.OwnerJWKSURL, "https URL of the issuer's JWKS (exclusive with owner-jwks-file)")
	fs.StringVar(&c.OwnerJWKSFile, "owner-jwks-file", c.OwnerJWKSFile, "file holding the issuer's JWKS (exclusive with owner-jwks-url)")
	fs.StringVar(&c.OwnerSubjectClaim, "owner-subject-claim", c.OwnerSubjectClaim, "JWT claim that names the owner: sub, or email (admitted only with email_verified true)")
	fs.StringVar(&c.OwnerAllowedSubjects, "owner-allowed-subjects", c.OwnerAllowedSubjects, "comma-separated subject claim values admitted as owners (OIDC needs this and/or owner-allowed-groups)")
	fs.StringVar(&c.OwnerAllowedGroups, "owner-allowed-groups", c.OwnerAllowedGroups, "comma-separated groups whose members are admitted as owners (read from owner-groups-claim)")
	fs.StringVar(&c.OwnerGroupsClaim, "owner-groups-claim", c.OwnerGroupsClaim, "top-level JWT claim listing the subject's groups (array of strings or one string)")
	fs.Float64Var(&c.AgentRailReadRate, "agent-rail-read-rate", c.AgentRailReadRate, "rail reads a second one agent's requests may cause on one rail account (resolving what a request names, MCP tool descriptions); past it, such requests are refused with 429 and Retry-After (0: no limit)")
	fs.IntVar(&c.AgentRailReadBurst, "agent-rail-read-burst", c.AgentRailReadBurst, "rail reads one agent's requests may cause at once on one rail account")
	fs.Float64Var(&c.AgentDecisionRate, "agent-decision-rate", c.AgentDecisionRate, "decisions a second one agent may ask for, whatever their verdict; past it, its requests are refused with 429 and Retry-After, and at most one such refusal a second is recorded (0: no limit)")
	fs.IntVar(&c.AgentDecisionBurst, "agent-decision-burst", c.AgentDecisionBurst, "decisions one agent may ask for at once")
	fs.Float64Var(&c.OwnerQuotaRate, "owner-quota-rate", c.OwnerQuotaRate, "owner API calls per second per source and per owner (0: no quota)")
	fs.IntVar(&c.OwnerQuotaBurst, "owner-quota-burst", c.OwnerQuotaBurst, "owner API calls allowed at once per source and per owner")
	fs.Float64Var(&c.AuthFailureRate, "auth-failure-rate", c.AuthFailureRate, "failed credential attempts forgiven per second, per source and per credential (0: never block)")
	fs.IntVar(&c.AuthFailureBurst, "auth-failure-burst", c.AuthFailureBurst, "failed credential attempts tolerated before 429")
	fs.StringVar(&c.TrustedProxies, "trusted-proxies", c.TrustedProxies, "comma-separated CIDR prefixes of proxies whose X-Forwarded-For names a caller's source for quotas (default none: forwarding headers are ignored)")
	fs.DurationVar(&c.ConsoleSessionTTL, "console-session-ttl", c.ConsoleSessionTTL, "lifetime of an owner console session (at most 24h; a token sign-in's session also ends with its owner token)")
	fs.StringVar(&c.ConsoleURL, "console-url", c.ConsoleURL, "external base URL of the console (https://host[:port]; http only for localhost or 127.0.0.1): the base of the OIDC redirect_uri, required with owner-client-id")
	fs.StringVar(&c.OwnerClientID, "owner-client-id", c.OwnerClientID, "OAuth client id of the console's OIDC sign-in with owner-issuer (authorization code + PKCE); empty: the console signs in with owner tokens only")
	fs.StringVar(&c.OwnerClientSecretFile, "owner-client-secret-file", c.OwnerClientSecretFile, "file holding the client secret of a confidential OIDC client (optional)")
	fs.StringVar(&c.OwnerAuthorizationURL, "owner-authorization-url", c.OwnerAuthorizationURL, "the issuer's authorization endpoint (with owner-token-url; default: discovered from owner-issuer)")
	fs.StringVar(&c.OwnerTokenURL, "owner-token-url", c.OwnerTokenURL, "the issuer's token endpoint (with owner-authorization-url; default: discovered from owner-issuer)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address of the countersign.v1 APIs (every caller authenticated) and health: host:port or unix:/path")
	fs.StringVar(&c.EnvoyAddr, "envoy-addr", c.EnvoyAddr, "listen address of Envoy's ext_authz and ext_proc, whose ALLOW carries the rail key: unix:/path on a volume only Envoy and Countersign mount; TCP needs envoy-tls-cert, envoy-tls-key and envoy-client-ca (mutual TLS) or --"+UnsafeEnvoyTCPFlag)
	fs.BoolVar(&c.GRPCReflection, "grpc-reflection", c.GRPCReflection, "serve gRPC server reflection on grpc-addr (it answers without a credential; off by default)")
	fs.StringVar(&c.EnvoyTLSCert, "envoy-tls-cert", c.EnvoyTLSCert, "PEM certificate of a TCP envoy-addr (mutual TLS)")
	fs.StringVar(&c.EnvoyTLSKey, "envoy-tls-key", c.EnvoyTLSKey, "PEM private key of a TCP envoy-addr (mutual TLS)")
	fs.StringVar(&c.EnvoyClientCA, "envoy-client-ca", c.EnvoyClientCA, "PEM CA bundle Envoy's client certificate must chain to (mutual TLS on a TCP envoy-addr)")
	fs.BoolVar(&c.UnsafeEnvoyTCP, UnsafeEnvoyTCPFlag, c.UnsafeEnvoyTCP, "DANGER: serve ext_authz/ext_proc on plain TCP. Whatever can connect to envoy-addr can obtain the rail keys; use only where no agent shares the network (e.g. Envoy in another pod reached over a mesh's mTLS)")
	fs.BoolVar(&c.InAgentPod, InAgentPodFlag, c.InAgentPod, "this process runs in the agent's pod (as the injected sidecar does), whose loopback and /etc/hosts the agent shares: "+
		"refuse a ledger URL that is not sslmode=verify-full or names a loopback host, and a rail or MCP base_url that is not https")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address (REST, the owner console at /console/, /metrics, /healthz, /readyz, /openapi.json)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a graceful shutdown may take before connections are cut")
	fs.DurationVar(&c.ReadinessInterval, "readiness-interval", c.ReadinessInterval, "how often the ledger is probed for readiness")
}

// PooledDBMaxConns is the ledger pool of a process behind PgBouncer when
// db-max-conns is not set: many sidecars share the pooler's server
// connections, and each decides in a few short transactions.
const PooledDBMaxConns = 4

// ApplyPoolerDefaults lowers the pool to PooledDBMaxConns behind a pooler
// unless db-max-conns was set (on the command line, in the environment or in
// the config file: Resolve marks each as set).
func (c *Config) ApplyPoolerDefaults(fs *pflag.FlagSet) {
	if f := fs.Lookup("db-max-conns"); f != nil && !f.Changed && c.DBPooler == "pgbouncer" {
		c.DBMaxConns = PooledDBMaxConns
	}
}

// EnvName is the environment variable that sets flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Resolve fills every flag that was not given on the command line from its
// environment variable, or else from the config file. getenv is os.LookupEnv
// in production.
func Resolve(fs *pflag.FlagSet, getenv func(string) (string, bool)) error {
	file := map[string]any{}
	path := ""
	if f := fs.Lookup("config"); f != nil {
		path = f.Value.String()
		if !f.Changed {
			if v, ok := getenv(EnvName("config")); ok {
				path = v
			}
		}
	}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config file: %w", err)
		}
		if err := yaml.Unmarshal(raw, &file); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		for key := range file {
			if f := fs.Lookup(key); f == nil || key == "config" {
				return fmt.Errorf("config file %s: unknown setting %q", path, key)
			}
		}
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		if v, ok := getenv(EnvName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", EnvName(f.Name), err))
			}
			return
		}
		if v, ok := file[f.Name]; ok && f.Name != "config" {
			if err := fs.Set(f.Name, fileValue(v)); err != nil {
				errs = append(errs, fmt.Errorf("config file %s: %s: %w", path, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// fileValue is a config file value as a flag would spell it: a YAML list
// is comma-separated (the list settings are comma-separated strings).
func fileValue(v any) string {
	l, ok := v.([]any)
	if !ok {
		return fmt.Sprint(v)
	}
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = fmt.Sprint(e)
	}
	return strings.Join(parts, ",")
}

// ValidateDatabase checks the settings BindDatabase registers.
func (c Config) ValidateDatabase() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, fmt.Errorf("database-url (%s) is required", EnvName("database-url")))
	} else if !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		errs = append(errs, fmt.Errorf("database-url (%s) must be a postgres:// URL", EnvName("database-url")))
	}
	if c.DBMaxConns < 1 || c.DBMaxConns > 1000 {
		errs = append(errs, fmt.Errorf("db-max-conns (%s) must be between 1 and 1000, got %d", EnvName("db-max-conns"), c.DBMaxConns))
	}
	switch c.DBPooler {
	case "", "none", "pgbouncer":
	default:
		errs = append(errs, fmt.Errorf("db-pooler (%s) must be none or pgbouncer, got %q", EnvName("db-pooler"), c.DBPooler))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log-level (%s) must be debug, info, warn or error, got %q", EnvName("log-level"), c.LogLevel))
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		errs = append(errs, fmt.Errorf("log-format (%s) must be json or text, got %q", EnvName("log-format"), c.LogFormat))
	}
	return errors.Join(errs...)
}

// ValidateEngine checks the settings BindEngine registers (and the database).
func (c Config) ValidateEngine() error {
	errs := []error{c.ValidateDatabase()}
	if c.LeaseTTL < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease-ttl (%s) must be at least 100ms, got %s", EnvName("lease-ttl"), c.LeaseTTL))
	}
	if c.RailSettle < 0 {
		errs = append(errs, fmt.Errorf("rail-settle-time (%s) must not be negative", EnvName("rail-settle-time")))
	}
	if c.ReconcileDelay < 0 {
		errs = append(errs, fmt.Errorf("reconcile-delay (%s) must not be negative", EnvName("reconcile-delay")))
	}
	if c.MaxPendingApprovals < 1 || c.MaxPendingApprovals > 100000 {
		errs = append(errs, fmt.Errorf("max-pending-approvals (%s) must be between 1 and 100000, got %d", EnvName("max-pending-approvals"), c.MaxPendingApprovals))
	}
	if c.ReconcileClaimTTL < time.Second {
		errs = append(errs, fmt.Errorf("reconcile-claim-ttl (%s) must be at least 1s, got %s", EnvName("reconcile-claim-ttl"), c.ReconcileClaimTTL))
	}
	if c.MaxRequestBytes < 1024 || c.MaxRequestBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("max-request-bytes (%s) must be between 1024 and %d, got %d", EnvName("max-request-bytes"), 64<<20, c.MaxRequestBytes))
	}
	if c.ReconcileMaxAttempts < 1 || c.ReconcileMaxAttempts > 1000 {
		errs = append(errs, fmt.Errorf("reconcile-max-attempts (%s) must be between 1 and 1000, got %d", EnvName("reconcile-max-attempts"), c.ReconcileMaxAttempts))
	}
	return errors.Join(errs...)
}

// agentLimit checks the token bucket of one per-agent limit, whose flags
// are prefix-rate and prefix-burst, counting what.
func agentLimit(prefix, what string, rate float64, burst int) error {
	switch {
	case rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0):
		return fmt.Errorf("%s-rate (%s) must be a number of %s a second, 0 or more (0 turns the limit off), got %v",
			prefix, EnvName(prefix+"-rate"), what, rate)
	case burst < 0:
		return fmt.Errorf("%s-burst (%s) must not be negative, got %d", prefix, EnvName(prefix+"-burst"), burst)
	case rate > 0 && burst < 1:
		return fmt.Errorf("%s-burst (%s) must be at least 1 while %s-rate (%s) is set; set the rate to 0 to turn the limit off",
			prefix, EnvName(prefix+"-burst"), prefix, EnvName(prefix+"-rate"))
	}
	return nil
}

// Validate checks every setting of a serving command.
func (c Config) Validate() error {
	errs := []error{c.ValidateEngine()}
	if c.OwnerQuotaRate < 0 || c.AuthFailureRate < 0 {
		errs = append(errs, fmt.Errorf("owner-quota-rate and auth-failure-rate (%s, %s) must not be negative", EnvName("owner-quota-rate"), EnvName("auth-failure-rate")))
	}
	errs = append(errs, agentLimit("agent-rail-read", "reads", c.AgentRailReadRate, c.AgentRailReadBurst),
		agentLimit("agent-decision", "decisions", c.AgentDecisionRate, c.AgentDecisionBurst))
	if c.OwnerQuotaBurst < 1 || c.AuthFailureBurst < 1 {
		errs = append(errs, fmt.Errorf("owner-quota-burst and auth-failure-burst (%s, %s) must be at least 1", EnvName("owner-quota-burst"), EnvName("auth-failure-burst")))
	}
	if err := c.OwnerAuth().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("owner authentication: %w", err))
	}
	errs = append(errs, c.validateConsole())
	if c.OutboxInterval < 0 {
		errs = append(errs, fmt.Errorf("outbox-interval (%s) must not be negative", EnvName("outbox-interval")))
	}
	if _, err := c.WebhookNetworks(); err != nil {
		errs = append(errs, fmt.Errorf("webhook-allow-networks (%s): %w", EnvName("webhook-allow-networks"), err))
	}
	if _, err := c.TrustedProxyNetworks(); err != nil {
		errs = append(errs, fmt.Errorf("trusted-proxies (%s): %w", EnvName("trusted-proxies"), err))
	}
	if c.PruneInterval < 0 {
		errs = append(errs, fmt.Errorf("prune-interval (%s) must not be negative", EnvName("prune-interval")))
	}
	if c.ReconcileInterval < 0 {
		errs = append(errs, fmt.Errorf("reconcile-interval (%s) must not be negative", EnvName("reconcile-interval")))
	}
	if c.AuditSealInterval < 10*time.Millisecond || c.AuditSealInterval > time.Hour {
		errs = append(errs, fmt.Errorf("audit-seal-interval (%s) must be between 10ms and 1h, got %s", EnvName("audit-seal-interval"), c.AuditSealInterval))
	}
	errs = append(errs, c.validateAuditKeys())
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if path, ok := UnixPath(a.addr); ok && a.flag == "grpc-addr" {
			if !filepath.IsAbs(path) {
				errs = append(errs, fmt.Errorf("%s (%s) unix socket path must be absolute, got %q", a.flag, EnvName(a.flag), path))
			}
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("%s (%s) must be host:port, got %q", a.flag, EnvName(a.flag), a.addr))
		}
	}
	errs = append(errs, c.validateEnvoyListener())
	if c.InAgentPod {
		errs = append(errs, c.validateInAgentPod(), c.validateConsoleInAgentPod())
	}
	if c.GRPCAddr == c.HTTPAddr && !strings.HasSuffix(c.GRPCAddr, ":0") {
		errs = append(errs, fmt.Errorf("grpc-addr and http-addr must differ, both are %q", c.GRPCAddr))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("shutdown-timeout (%s) must be positive", EnvName("shutdown-timeout")))
	}
	if c.ReadinessInterval < 100*time.Millisecond || c.ReadinessInterval > time.Minute {
		errs = append(errs, fmt.Errorf("readiness-interval (%s) must be between 100ms and 1m, got %s", EnvName("readiness-interval"), c.ReadinessInterval))
	}
	return errors.Join(errs...)
}

// validateConsole checks the console's settings.
func (c Config) validateConsole() error {
	var errs []error
	if c.ConsoleSessionTTL < time.Minute || c.ConsoleSessionTTL > ownerauth.MaxSessionTTL {
		errs = append(errs, fmt.Errorf("console-session-ttl (%s) must be between 1m and 24h, got %s", EnvName("console-session-ttl"), c.ConsoleSessionTTL))
	}
	if c.ConsoleURL != "" {
		if _, err := console.Origin(c.ConsoleURL); err != nil {
			errs = append(errs, fmt.Errorf("%w (%s)", err, EnvName("console-url")))
		}
	}
	if c.OwnerClientID == "" {
		for _, f := range []struct{ flag, v string }{{"owner-client-secret-file", c.OwnerClientSecretFile},
			{"owner-authorization-url", c.OwnerAuthorizationURL}, {"owner-token-url", c.OwnerTokenURL}} {
			if f.v != "" {
				errs = append(errs, fmt.Errorf("%s (%s) is set but owner-client-id is not: the console's OIDC sign-in is off", f.flag, EnvName(f.flag)))
			}
		}
		return errors.Join(errs...)
	}
	if c.OwnerIssuer == "" {
		errs = append(errs, fmt.Errorf("owner-client-id (%s) needs owner-issuer: the console signs in with the owner OIDC issuer", EnvName("owner-client-id")))
	}
	if c.ConsoleURL == "" {
		errs = append(errs, fmt.Errorf("owner-client-id needs console-url (%s): the external base URL the issuer redirects back to", EnvName("console-url")))
	}
	if (c.OwnerAuthorizationURL == "") != (c.OwnerTokenURL == "") {
		errs = append(errs, errors.New("owner-authorization-url and owner-token-url go together: set both, or neither to discover them from owner-issuer"))
	}
	if c.OwnerClientSecretFile != "" {
		if _, err := c.OwnerClientSecret(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// OwnerClientSecret reads owner-client-secret-file ("" when not set).
func (c Config) OwnerClientSecret() (string, error) {
	if c.OwnerClientSecretFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.OwnerClientSecretFile)
	if err != nil {
		return "", fmt.Errorf("owner-client-secret-file (%s): %w", EnvName("owner-client-secret-file"), err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("owner-client-secret-file (%s) %s is empty", EnvName("owner-client-secret-file"), c.OwnerClientSecretFile)
	}
	return secret, nil
}

// validateEnvoyListener refuses an Envoy-facing listener the agent could
// reach: its ALLOW answers carry the rail keys (C1, DESIGN §11).
func (c Config) validateEnvoyListener() error {
	name := fmt.Sprintf("envoy-addr (%s)", EnvName("envoy-addr"))
	tlsSet := 0
	for _, f := range []string{c.EnvoyTLSCert, c.EnvoyTLSKey, c.EnvoyClientCA} {
		if f != "" {
			tlsSet++
		}
	}
	if path, ok := UnixPath(c.EnvoyAddr); ok {
		switch {
		case !filepath.IsAbs(path):
			return fmt.Errorf("%s unix socket path must be absolute, got %q", name, path)
		case len(path) > 104:
			return fmt.Errorf("%s unix socket path is %d bytes; the system allows about 104", name, len(path))
		case tlsSet > 0:
			return fmt.Errorf("envoy-tls-cert, envoy-tls-key and envoy-client-ca are for a TCP %s; a unix socket is guarded by its volume", name)
		}
		return nil
	}
	if _, port, err := net.SplitHostPort(c.EnvoyAddr); err != nil || port == "" {
		return fmt.Errorf("%s must be unix:/path or host:port, got %q", name, c.EnvoyAddr)
	}
	if c.EnvoyAddr == c.GRPCAddr || c.EnvoyAddr == c.HTTPAddr {
		return fmt.Errorf("%s must differ from grpc-addr and http-addr: the rail keys get a listener of their own", name)
	}
	switch {
	case tlsSet == 3:
		return nil
	case tlsSet > 0:
		return fmt.Errorf("a TCP %s needs all of envoy-tls-cert, envoy-tls-key and envoy-client-ca (mutual TLS), %d of 3 are set", name, tlsSet)
	case c.UnsafeEnvoyTCP:
		return nil
	}
	return fmt.Errorf("%s is TCP (%q) without mutual TLS: an ALLOW answer carries the rail key, and in a pod every container, "+
		"the agent's too, can connect to the pod's addresses and ask for one. Use unix:/path on a volume only Envoy and Countersign mount, "+
		"or set envoy-tls-cert, envoy-tls-key and envoy-client-ca; --%s overrides this where no agent can reach the address", name, c.EnvoyAddr, UnsafeEnvoyTCPFlag)
}

// OwnerAuth is the owner authentication (OIDC) configuration.
func (c Config) OwnerAuth() ownerauth.Config {
	return ownerauth.Config{Issuer: c.OwnerIssuer, Audience: c.OwnerAudience, JWKSURL: c.OwnerJWKSURL,
		JWKSFile: c.OwnerJWKSFile, SubjectClaim: c.OwnerSubjectClaim, AllowedSubjects: list(c.OwnerAllowedSubjects),
		AllowedGroups: list(c.OwnerAllowedGroups), GroupsClaim: c.OwnerGroupsClaim, InAgentPod: c.InAgentPod}
}

// list splits a comma-separated setting, dropping blanks.
func list(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// WebhookNetworks parses WebhookAllowNetworks: CIDR prefixes or single
// addresses, comma-separated.
func (c Config) WebhookNetworks() ([]netip.Prefix, error) { return networks(c.WebhookAllowNetworks) }

// TrustedProxyNetworks parses TrustedProxies, as WebhookNetworks.
func (c Config) TrustedProxyNetworks() ([]netip.Prefix, error) { return networks(c.TrustedProxies) }

func networks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR prefix nor an IP address", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// UnixPath returns the socket path of a "unix:/path" or "unix:///path"
// address.
func UnixPath(addr string) (string, bool) {
	rest, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return "", false
	}
	if p, ok := strings.CutPrefix(rest, "//"); ok {
		rest = p
	}
	return rest, true
}

// validateAuditKeys checks that the audit key files read, and that a
// verifier key given beside the signing key is its public half: the owner
// API trusts one key, and another would refuse every checkpoint this
// process seals.
func (c Config) validateAuditKeys() error {
	var signerV note.Verifier
	var errs []error
	if c.AuditSigningKey != "" {
		var err error
		if _, signerV, err = audit.LoadSigner(c.AuditSigningKey); err != nil {
			errs = append(errs, fmt.Errorf("audit-signing-key (%s): %w", EnvName("audit-signing-key"), err))
		}
	}
	if c.AuditVerifierKey != "" {
		v, err := audit.LoadVerifier(c.AuditVerifierKey)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("audit-verifier-key (%s): %w", EnvName("audit-verifier-key"), err))
		case signerV != nil && (v.Name() != signerV.Name() || v.KeyHash() != signerV.KeyHash()):
			errs = append(errs, fmt.Errorf("audit-verifier-key (%s) is key %s+%08x, audit-signing-key (%s) is of key %s+%08x: VerifyAudit would refuse every checkpoint this process seals; give the signing key's own verifier key, or only one of them",
				EnvName("audit-verifier-key"), v.Name(), v.KeyHash(), EnvName("audit-signing-key"), signerV.Name(), signerV.KeyHash()))
		}
	}
	return errors.Join(errs...)
}
