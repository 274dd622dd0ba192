package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/inject"
	"github.com/countersign/countersign/internal/logging"
	"github.com/countersign/countersign/internal/webhookcert"
)

// injectFlags are `countersign inject`'s settings as the flags spell them.
type injectFlags struct {
	listen, certFile, keyFile string
	// tlsMode "files" serves certFile/keyFile (cert-manager, or a Secret
	// of the operator's); "self" makes and renews its own (webhookcert).
	tlsMode, tlsSecret, webhookConfig, service string
	certSync                                   time.Duration
	pullPolicy                                 string
	railKeys, baseURLs                         []string
	logLevel, logFormat                        string
	cfg                                        inject.Config
}

func defaultInjectFlags() *injectFlags {
	return &injectFlags{listen: ":8443", tlsMode: "files", certSync: time.Minute, pullPolicy: string(corev1.PullIfNotPresent), logLevel: "info", logFormat: "json",
		cfg: inject.Config{EnvoyConfigKey: "envoy.yaml", RailsConfigKey: "rails.yaml", DatabaseKey: "url", HTTPPort: 15080, AuditKeyKey: "key"}}
}

func newInject() *cobra.Command {
	f := defaultInjectFlags()
	cmd := &cobra.Command{
		Use:   "inject",
		Short: "Serve the mutating admission webhook that adds Countersign and Envoy to agent pods",
		Long: "Inject serves a Kubernetes mutating admission webhook (AdmissionReview admission.k8s.io/v1, HTTPS only) " +
			"that adds Countersign and Envoy as native sidecars to opted-in agent pods and refuses pods that would " +
			"undo their isolation. " + inject.PathNamespace + " is for a webhook entry whose namespaceSelector picks " +
			"namespaces labelled " + inject.InjectKey + "=enabled (every pod there is guarded unless it opts out); " +
			inject.PathPod + " for an entry over other namespaces (only pods labelled or annotated " + inject.InjectKey +
			": \"true\"). See docs/injection.md.\n\n" +
			"Every flag can also be set with COUNTERSIGN_<FLAG> (e.g. COUNTERSIGN_NAMESPACE); list flags take commas.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.Resolve(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			cfg, err := f.config()
			if err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			log := logging.New(cmd.ErrOrStderr(), f.logFormat, f.logLevel)
			getCert, err := f.certificates(cmd.Context(), cfg.Namespace, log)
			if err != nil {
				return err
			}
			lis, err := (&net.ListenConfig{}).Listen(cmd.Context(), "tcp", f.listen)
			if err != nil {
				return fmt.Errorf("listen-addr %s: %w", f.listen, err)
			}
			log.Info("injector listening", "addr", lis.Addr().String(), "namespace", cfg.Namespace, "version", cfg.Version)
			return ServeInject(cmd.Context(), lis, getCert, cfg, log)
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

func (f *injectFlags) bind(fs *pflag.FlagSet) {
	c := &f.cfg
	fs.StringVar(&f.listen, "listen-addr", f.listen, "HTTPS listen address of the webhook (the API server calls webhooks over TLS only)")
	fs.StringVar(&f.tlsMode, "tls-mode", f.tlsMode, "where the webhook's serving certificate comes from: files (tls-cert-file and tls-key-file, e.g. a Secret cert-manager renews) or self (the injector makes a CA and a leaf in tls-secret, renews them, and writes the CA into webhook-config's caBundle; needs its service account)")
	fs.StringVar(&f.certFile, "tls-cert-file", f.certFile, "tls-mode files: PEM certificate of the webhook, for the Service name the API server calls (read again when it changes)")
	fs.StringVar(&f.keyFile, "tls-key-file", f.keyFile, "tls-mode files: PEM private key of tls-cert-file")
	fs.StringVar(&f.tlsSecret, "tls-secret", f.tlsSecret, "tls-mode self: the Secret in namespace the replicas keep their CA and leaf in")
	fs.StringVar(&f.webhookConfig, "webhook-config", f.webhookConfig, "tls-mode self: the MutatingWebhookConfiguration whose webhooks' caBundle the injector writes")
	fs.StringVar(&f.service, "service", f.service, "tls-mode self: the Service the API server calls the webhook by (the leaf is for <service>.<namespace>.svc)")
	fs.DurationVar(&f.certSync, "cert-sync-interval", f.certSync, "tls-mode self: how often the Secret and caBundle are checked and renewed (10s-1h)")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "the injector's own namespace, never injected (kube-system never is either)")
	fs.StringVar(&c.CountersignImage, "countersign-image", c.CountersignImage, "image of the injected countersign container, pinned (repository:tag or @sha256:…)")
	fs.StringVar(&c.EnvoyImage, "envoy-image", c.EnvoyImage, "image of the injected Envoy container, pinned (e.g. envoyproxy/envoy:distroless-v1.40.2)")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", f.pullPolicy, "imagePullPolicy of the injected containers: Always, IfNotPresent or Never")
	fs.StringVar(&c.EnvoyConfigMap, "envoy-configmap", c.EnvoyConfigMap, "ConfigMap (in the agent's namespace) holding Envoy's bootstrap for an agent pod: envoy/egress.yaml")
	fs.StringVar(&c.EnvoyConfigKey, "envoy-configmap-key", c.EnvoyConfigKey, "key of the bootstrap in envoy-configmap")
	fs.StringVar(&c.RailsConfigMap, "rails-configmap", c.RailsConfigMap, "ConfigMap (in the agent's namespace) holding Countersign's rails file; its key_file paths are "+inject.RailKeyDir+"/<account>/key")
	fs.StringVar(&c.RailsConfigKey, "rails-configmap-key", c.RailsConfigKey, "key of the rails file in rails-configmap")
	fs.StringVar(&c.DatabaseSecret, "database-secret", c.DatabaseSecret, "Secret (in the agent's namespace) holding the ledger's PostgreSQL URL")
	fs.StringVar(&c.DatabaseKey, "database-secret-key", c.DatabaseKey, "key of the URL in database-secret")
	fs.StringSliceVar(&f.railKeys, "rail-key", f.railKeys, "a rail account's key Secret, account=secret/key (repeat or comma-separate); mounted into countersign only")
	fs.StringSliceVar(&f.baseURLs, "base-url", f.baseURLs, "an environment variable every agent container gets, NAME=http://host:15001 (repeat or comma-separate), e.g. STRIPE_API_BASE=http://stripe.egress.local:15001; a host name is aliased to 127.0.0.1")
	fs.IntVar(&c.HTTPPort, "countersign-http-port", c.HTTPPort, "port of the injected Countersign's HTTP listener (its startup probe reads /readyz there)")
	fs.StringVar(&c.DBPooler, "db-pooler", c.DBPooler, "the injected Countersign's --db-pooler: none, or pgbouncer when database-secret's URL points at PgBouncer in transaction pooling mode")
	fs.StringVar(&c.AuditKeySecret, "audit-signing-key-secret", c.AuditKeySecret, "Secret (in the agent's namespace) holding the audit log's signing key (countersign audit keygen); mounted into countersign only. Empty: the injected sidecars do not seal the audit log")
	fs.StringVar(&c.AuditKeyKey, "audit-signing-key-secret-key", c.AuditKeyKey, "key of the signing key in audit-signing-key-secret")
	fs.BoolVar(&c.Egress.Enabled, "close-egress", c.Egress.Enabled, "add an init container, first, that rejects what the agent's UID (egress-agent-uid) sends to the closed rail hosts and CIDRs (iptables and ip6tables), and refuse agent pods any of whose containers could run as another UID")
	fs.StringVar(&c.Egress.Image, "egress-image", c.Egress.Image, "image of the egress init container, pinned, with /bin/sh, iptables and ip6tables (it runs as root with NET_ADMIN and NET_RAW only)")
	fs.Int64Var(&c.Egress.AgentUID, "egress-agent-uid", c.Egress.AgentUID, "the UID every agent container must run as, whose direct egress is closed (never 0, nor the sidecars' 65532 or 101)")
	fs.StringSliceVar(&c.Egress.Hosts, "egress-close-host", c.Egress.Hosts, "a rail host to close, e.g. api.stripe.com (repeat or comma-separate); resolved once, when the pod starts: prefer egress-close-cidr")
	fs.StringSliceVar(&c.Egress.CIDRs, "egress-close-cidr", c.Egress.CIDRs, "an IPv4 or IPv6 range to close, e.g. 203.0.113.0/24 (repeat or comma-separate); loopback is never closed")
	fs.StringVar(&f.logLevel, "log-level", f.logLevel, "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", f.logFormat, "log format: json or text")
}

// config turns the flags into the injector's Config, validated.
func (f *injectFlags) config() (inject.Config, error) {
	cfg := f.cfg
	cfg.Version = Version
	cfg.PullPolicy = corev1.PullPolicy(f.pullPolicy)
	var errs []error
	switch f.tlsMode {
	case "files":
		if f.certFile == "" || f.keyFile == "" {
			errs = append(errs, errors.New("tls-cert-file and tls-key-file are required with tls-mode files: the API server calls webhooks over HTTPS only"))
		}
	case "self":
		if f.certFile != "" || f.keyFile != "" {
			errs = append(errs, errors.New("tls-cert-file and tls-key-file are for tls-mode files; tls-mode self makes its own"))
		}
		for _, v := range []struct{ flag, value string }{{"tls-secret", f.tlsSecret}, {"webhook-config", f.webhookConfig}, {"service", f.service}} {
			if !validName(v.value) {
				errs = append(errs, fmt.Errorf("%s must be a Kubernetes object name with tls-mode self, got %q", v.flag, v.value))
			}
		}
		if f.certSync < 10*time.Second || f.certSync > time.Hour {
			errs = append(errs, fmt.Errorf("cert-sync-interval must be between 10s and 1h, got %s", f.certSync))
		}
	default:
		errs = append(errs, fmt.Errorf("tls-mode must be files or self, got %q", f.tlsMode))
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		errs = append(errs, fmt.Errorf("listen-addr must be host:port, got %q", f.listen))
	}
	switch f.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log-level must be debug, info, warn or error, got %q", f.logLevel))
	}
	if f.logFormat != "json" && f.logFormat != "text" {
		errs = append(errs, fmt.Errorf("log-format must be json or text, got %q", f.logFormat))
	}
	for _, s := range f.railKeys {
		account, ref, ok := strings.Cut(s, "=")
		secret, key, ok2 := strings.Cut(ref, "/")
		if !ok || !ok2 {
			errs = append(errs, fmt.Errorf("rail-key must be account=secret/key, got %q", s))
			continue
		}
		cfg.RailKeys = append(cfg.RailKeys, inject.RailKey{Account: account, Secret: secret, Key: key})
	}
	for _, s := range f.baseURLs {
		name, value, ok := strings.Cut(s, "=")
		if !ok {
			errs = append(errs, fmt.Errorf("base-url must be NAME=URL, got %q", s))
			continue
		}
		cfg.BaseURLs = append(cfg.BaseURLs, inject.EnvVar{Name: name, Value: value})
	}
	errs = append(errs, cfg.Validate())
	return cfg, errors.Join(errs...)
}

// validName is a DNS subdomain name, as Kubernetes names Secrets, Services
// and webhook configurations.
func validName(s string) bool {
	return len(s) <= 253 && objectName.MatchString(s)
}

var objectName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// certificates is the webhook's GetCertificate: files read again when they
// change, or webhookcert's manager renewing in the background.
func (f *injectFlags) certificates(ctx context.Context, namespace string, log *slog.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if f.tlsMode == "files" {
		pair, err := inject.LoadKeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, err
		}
		return pair.GetCertificate, nil
	}
	kube, err := webhookcert.InCluster()
	if err != nil {
		return nil, err
	}
	m := &webhookcert.Manager{Kube: kube, Namespace: namespace, SecretName: f.tlsSecret, WebhookConfig: f.webhookConfig,
		DNSNames: webhookcert.ServiceNames(f.service, namespace), Policy: webhookcert.DefaultPolicy, Log: log}
	go m.Run(ctx, f.certSync, nil)
	return m.GetCertificate, nil
}

// ServeInject serves the webhook over TLS on lis until ctx ends, with the
// serving certificate getCert gives.
func ServeInject(ctx context.Context, lis net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), cfg inject.Config, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           inject.NewMux(cfg, log),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert},
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(lis, "", "") }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
