// Package inject is Countersign's mutating admission webhook: it adds
// Countersign and Envoy as native sidecars to opted-in agent pods, and
// refuses agent pods that would undo the isolation they rely on (DESIGN
// §11, §12), pods of an injected namespace that would read Countersign's
// Secrets, and updates that would unguard a guarded pod (judgeUpdate). The
// core (Decode, Mutate) is pure; Handler is the HTTP edge.
package inject

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Labels and annotations the injector reads and writes.
const (
	// InjectKey opts a namespace in (label, value "enabled", read by the
	// webhook's namespaceSelector) and a pod in ("true") or out ("false")
	// as a label or an annotation.
	InjectKey = "countersign.io/inject"
	// StatusKey marks a pod the injector has guarded (value "injected").
	StatusKey = "countersign.io/status"
	// VersionKey records which injector guarded it.
	VersionKey = "countersign.io/injector-version"
	// StatusInjected is StatusKey's value.
	StatusInjected = "injected"
)

// Names and paths of what is injected. The socket directory and the key
// and rails paths are the chart's (charts/countersign/templates/_helpers.tpl),
// so the chart's rails ConfigMap works unchanged.
const (
	CountersignContainer = "countersign"
	EnvoyContainer       = "countersign-envoy"

	SocketVolume      = "countersign-sockets"
	RailsVolume       = "countersign-rails"
	EnvoyConfigVolume = "countersign-envoy-config"
	TmpVolume         = "countersign-tmp"
	AuditKeyVolume    = "countersign-audit-key"
	railKeyVolume     = "countersign-rail-key-" // + index

	SocketDir      = "/var/run/countersign"
	EnvoySocket    = SocketDir + "/envoy.sock"
	APISocket      = SocketDir + "/api.sock"
	RailsDir       = "/etc/countersign"
	RailKeyDir     = "/var/run/secrets/countersign/rails"
	AuditKeyDir    = "/var/run/secrets/countersign/audit"
	EnvoyConfigDir = "/etc/envoy-countersign"

	// EnvoyPort is the egress listener of envoy/egress.yaml (127.0.0.1).
	EnvoyPort = 15001

	// countersignUID runs Countersign; its group owns the 0660 socket.
	countersignUID = 65532
	// envoyUID runs Envoy, with Countersign's group as its own so it can
	// connect to the socket; its admin socket (0600) stays its own.
	envoyUID = 101
)

// RailKey is one rail account's secret key: the Secret and the key in it.
// It is mounted at RailKeyDir/<Account>/key in the countersign container.
type RailKey struct {
	Account, Secret, Key string
}

// EnvVar is an environment variable the agent's containers get, e.g.
// STRIPE_API_BASE=http://stripe.egress.local:15001.
type EnvVar struct {
	Name, Value string
}

// Config is what the injector injects and where from. Nothing in it is a
// secret: Secrets are named, never read.
type Config struct {
	// Namespace is the injector's own namespace: never injected.
	Namespace string
	// Version is written to VersionKey.
	Version string

	CountersignImage, EnvoyImage string
	PullPolicy                   corev1.PullPolicy

	// EnvoyConfigMap holds Envoy's bootstrap (envoy/egress.yaml) under
	// EnvoyConfigKey; RailsConfigMap the rails file under RailsConfigKey.
	EnvoyConfigMap, EnvoyConfigKey string
	RailsConfigMap, RailsConfigKey string
	// DatabaseSecret holds the ledger URL under DatabaseKey.
	DatabaseSecret, DatabaseKey string
	RailKeys                    []RailKey
	// BaseURLs are set on every agent container; a host name in them is
	// resolved to 127.0.0.1 by a hostAliases entry.
	BaseURLs []EnvVar
	// HTTPPort is Countersign's HTTP listener (/readyz for the startup
	// probe, /metrics, owner REST).
	HTTPPort int
	// DBPooler is the injected serve's --db-pooler: "" or "none" (the URL
	// names PostgreSQL), or "pgbouncer" (many sidecars on one ledger
	// through PgBouncer in transaction pooling mode).
	DBPooler string
	// AuditKeySecret, when set, holds the audit log's note signer key under
	// AuditKeyKey; it is mounted into countersign only and its sequencer
	// seals the audit log. Empty: the injected serve does not seal.
	AuditKeySecret, AuditKeyKey string
	// Egress, when enabled, closes the agent's direct egress to the rail
	// hosts with an init container that runs before everything else.
	Egress EgressConfig
}

var (
	dnsLabel    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdom   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	secretKey   = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	envName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	railAccount = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
)

// Validate checks the configuration, naming each bad setting.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Namespace == "" || !dnsLabel.MatchString(c.Namespace) {
		bad("namespace must be the injector's own namespace (a DNS label), got %q", c.Namespace)
	}
	for _, img := range []struct{ flag, v string }{{"countersign-image", c.CountersignImage}, {"envoy-image", c.EnvoyImage}} {
		if msg := imageProblem(img.flag, img.v); msg != "" {
			bad("%s", msg)
		}
	}
	switch c.PullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		bad("image-pull-policy must be Always, IfNotPresent or Never, got %q", c.PullPolicy)
	}
	for _, o := range []struct{ flag, v string }{{"envoy-configmap", c.EnvoyConfigMap}, {"rails-configmap", c.RailsConfigMap}, {"database-secret", c.DatabaseSecret}} {
		if !dnsSubdom.MatchString(o.v) || len(o.v) > 253 {
			bad("%s must name a ConfigMap or Secret (a DNS subdomain), got %q", o.flag, o.v)
		}
	}
	for _, k := range []struct{ flag, v string }{{"envoy-configmap-key", c.EnvoyConfigKey}, {"rails-configmap-key", c.RailsConfigKey}, {"database-secret-key", c.DatabaseKey}} {
		if !secretKey.MatchString(k.v) || k.v == "." || k.v == ".." {
			bad("%s must be a ConfigMap or Secret key, got %q", k.flag, k.v)
		}
	}
	if len(c.RailKeys) == 0 {
		bad("at least one rail-key (account=secret/key) is required")
	}
	seen := map[string]bool{}
	for _, k := range c.RailKeys {
		switch {
		case !railAccount.MatchString(k.Account):
			bad("rail-key account must be 1-128 of [A-Za-z0-9_.:-], got %q", k.Account)
		case seen[k.Account]:
			bad("rail-key account %q is given twice", k.Account)
		case !dnsSubdom.MatchString(k.Secret):
			bad("rail-key %s: secret must name a Secret, got %q", k.Account, k.Secret)
		case !secretKey.MatchString(k.Key):
			bad("rail-key %s: key must be a Secret key, got %q", k.Account, k.Key)
		case k.Secret == c.DatabaseSecret:
			bad("rail-key %s: its Secret %q is also the database-secret", k.Account, k.Secret)
		}
		seen[k.Account] = true
	}
	if len(c.BaseURLs) == 0 {
		bad("at least one base-url (NAME=http://host:%d) is required: it is how the agent's SDK finds Envoy", EnvoyPort)
	}
	names := map[string]bool{}
	for _, e := range c.BaseURLs {
		if !envName.MatchString(e.Name) {
			bad("base-url: %q is not an environment variable name", e.Name)
		} else if names[e.Name] {
			bad("base-url %s is given twice", e.Name)
		} else if strings.HasPrefix(e.Name, "COUNTERSIGN_") {
			bad("base-url %s: COUNTERSIGN_* is Countersign's own settings", e.Name)
		}
		names[e.Name] = true
		if _, err := baseURLHost(e.Value); err != nil {
			bad("base-url %s: %v", e.Name, err)
		}
	}
	if c.HTTPPort < 1 || c.HTTPPort > 65535 || c.HTTPPort == EnvoyPort {
		bad("countersign-http-port must be a port other than %d, got %d", EnvoyPort, c.HTTPPort)
	}
	switch c.DBPooler {
	case "", "none", "pgbouncer":
	default:
		bad("db-pooler must be none or pgbouncer, got %q", c.DBPooler)
	}
	if c.AuditKeySecret != "" {
		switch {
		case !dnsSubdom.MatchString(c.AuditKeySecret) || len(c.AuditKeySecret) > 253:
			bad("audit-signing-key-secret must name a Secret (a DNS subdomain), got %q", c.AuditKeySecret)
		case !secretKey.MatchString(c.AuditKeyKey) || c.AuditKeyKey == "." || c.AuditKeyKey == "..":
			bad("audit-signing-key-secret-key must be a Secret key, got %q", c.AuditKeyKey)
		case c.AuditKeySecret == c.DatabaseSecret:
			bad("audit-signing-key-secret %q is also the database-secret", c.AuditKeySecret)
		}
		for _, k := range c.RailKeys {
			if k.Secret == c.AuditKeySecret {
				bad("audit-signing-key-secret %q is also rail-key %s's Secret", c.AuditKeySecret, k.Account)
			}
		}
	}
	errs = append(errs, c.validateEgress()...)
	return errors.Join(errs...)
}

// imageProblem says what is wrong with an image flag's value, "" if nothing.
func imageProblem(flag, v string) string {
	switch {
	case v == "":
		return flag + " is required"
	case strings.ContainsAny(v, " \t\n"):
		return fmt.Sprintf("%s must not contain spaces, got %q", flag, v)
	case !strings.Contains(v, "@") && (!strings.Contains(lastSegment(v), ":") || strings.HasSuffix(v, ":latest")):
		return fmt.Sprintf("%s must be pinned by a tag other than latest or by a digest, got %q", flag, v)
	}
	return ""
}

// baseURLHost checks a base URL points at the local Envoy and returns the
// host name to alias to 127.0.0.1 ("" for 127.0.0.1 or localhost).
func baseURLHost(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("must be http://host:%d[/path] (Envoy's plain listener in the pod), got %q", EnvoyPort, raw)
	}
	if u.Port() != strconv.Itoa(EnvoyPort) {
		return "", fmt.Errorf("must name Envoy's port %d, got %q", EnvoyPort, raw)
	}
	host := u.Hostname()
	switch {
	case host == "127.0.0.1" || host == "localhost":
		return "", nil
	case net.ParseIP(host) != nil:
		return "", fmt.Errorf("must be 127.0.0.1, localhost or a host name (Envoy listens on 127.0.0.1 only), got %q", raw)
	case !dnsSubdom.MatchString(host):
		return "", fmt.Errorf("host %q is not a DNS name", host)
	}
	return host, nil
}

func lastSegment(image string) string {
	if i := strings.LastIndex(image, "/"); i >= 0 {
		return image[i+1:]
	}
	return image
}
