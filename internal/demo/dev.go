package demo

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/cli"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// NewCommand returns `dev`: the demo, for the demo binary only.
func NewCommand() *cobra.Command {
	cfg := config.Defaults()
	cfg.LogFormat = "text"
	// On one machine, webhook receivers are local.
	cfg.WebhookAllowNetworks = "127.0.0.0/8,::1"
	// The Envoy listener (its ALLOW carries the rail keys) is a socket in
	// the dev directory; the demo's egress proxy is the only client.
	cfg.EnvoyAddr = envoyInDir
	var dir string
	var pgPort int
	var mockAddr, egressAddr, razorpayEgressAddr string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Countersign with a private Postgres under ./.countersign/ (for a first look)",
		Long: "Dev starts a private PostgreSQL from the locally installed server binaries, keeping its data " +
			"under --dir, migrates the ledger, serves, and prints the endpoints, each rail's SDK settings and demo commands. " +
			"Every run refunds payments of its own on the mock rail, so the commands show each verdict again. " +
			"Ctrl-C stops everything it started; the data stays for the next run. " +
			"Not for production: use `serve` against a managed Postgres.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The database URL is this command's own; only the rest is validated.
			cfg.DatabaseURL = "postgres://dev"
			placeEnvoy := func(c *config.Config) {
				if c.EnvoyAddr == envoyInDir {
					c.EnvoyAddr = envoySocket(dir)
				}
			}
			log, err := cli.Load(cmd, &cfg, func(c config.Config) error { placeEnvoy(&c); return c.Validate() })
			placeEnvoy(&cfg)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := makeDir(dir); err != nil {
				return fmt.Errorf("dev: %w", err)
			}
			pgDir, moved, err := pgtest.KeptDataDir(filepath.Join(dir, "pg"))
			if err != nil {
				return fmt.Errorf("dev: %w", err)
			}
			if moved {
				fmt.Fprintf(cmd.OutOrStdout(), "starting PostgreSQL in %s (the postgres OS user, which runs it, cannot enter %s) …\n", pgDir, absOr(dir))
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "starting PostgreSQL in %s …\n", pgDir)
			}
			cluster, err := pgtest.StartCluster(ctx, pgtest.ClusterOptions{DataDir: pgDir, Port: pgPort})
			if err != nil {
				return fmt.Errorf("dev: postgres: %w", err)
			}
			defer func() {
				if err := cluster.Close(); err != nil {
					log.Error("stopping postgres", "err", err)
				}
			}()
			if err := cluster.CreateDatabase(ctx, "countersign", ""); err != nil && !isDuplicateDatabase(err) {
				return fmt.Errorf("dev: create database: %w", err)
			}
			cfg.DatabaseURL = cluster.URL("countersign")
			if _, err := ledger.Migrate(ctx, cfg.DatabaseURL, log); err != nil {
				return err
			}
			d, r, err := loadDemo(dir)
			if err != nil {
				return fmt.Errorf("dev: demo data: %w", err)
			}
			rs, mockURL, stopMock, err := startDevRail(ctx, filepath.Join(dir, "keys"), mockAddr, r.payments())
			if err != nil {
				return err
			}
			defer stopMock()
			// The demo seals its audit log: a signing key kept with the
			// rail keys, made on the first run.
			verifierKey := ""
			if cfg.AuditSigningKey == "" {
				if cfg.AuditSigningKey, verifierKey, err = devAuditKey(filepath.Join(dir, "keys")); err != nil {
					return fmt.Errorf("dev: audit key: %w", err)
				}
			}
			store, err := ledger.Open(ctx, cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			d, err = seedDemo(ctx, store, dir, d)
			store.Close()
			if err != nil {
				return fmt.Errorf("dev: demo data: %w", err)
			}
			stripe := &egressRail{Name: "Stripe", Account: devStripeAccount, RailHost: stripeHost}
			razorpay := &egressRail{Name: "Razorpay", Account: devRazorpayAccount, RailHost: razorpayHost}
			egress := []*egressRail{stripe, razorpay}
			if err := startDevEgress(ctx, cfg.EnvoyAddr, mockURL, egress, []string{egressAddr, razorpayEgressAddr}); err != nil {
				return fmt.Errorf("dev: %w", err)
			}
			defer stopEgress(egress)
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\nCountersign (dev) is up:\n")
			fmt.Fprintf(out, "  gRPC API (countersign.v1)         %s\n", cfg.GRPCAddr)
			fmt.Fprintf(out, "  Envoy listener (ext_authz, ext_proc; its ALLOW carries the rail keys)  %s\n", cfg.EnvoyAddr)
			fmt.Fprintf(out, "  REST                              http://%s/v1/\n", cfg.HTTPAddr)
			fmt.Fprintf(out, "  owner console                     http://%s/console/  (sign in with the owner token %s)\n", consoleHost(cfg.HTTPAddr), d.OwnerToken)
			fmt.Fprintf(out, "  readiness                         http://%s/readyz\n", cfg.HTTPAddr)
			fmt.Fprintf(out, "  metrics                           http://%s/metrics\n", cfg.HTTPAddr)
			fmt.Fprintf(out, "  OpenAPI                           http://%s/openapi.json\n", cfg.HTTPAddr)
			fmt.Fprintf(out, "  ledger                            %s\n", cfg.DatabaseURL)
			if verifierKey != "" {
				fmt.Fprintf(out, "  audit log (sealed every %s)       verifier key %s\n", cfg.AuditSealInterval, verifierKey)
			}
			fmt.Fprintf(out, "  mock rail (Stripe + Razorpay)     %s  (journal: %s/_mock/journal)\n", mockURL, mockURL)
			for _, e := range egress {
				fmt.Fprintf(out, "  egress to %-9s (Envoy's contract) %s  → rail account %s (%s)\n", e.Name, e.BaseURL(), e.Account, e.RailHost)
			}
			fmt.Fprintln(out)
			printSDK(out, d, stripe, razorpay)
			exe, _ := os.Executable()
			wd, _ := os.Getwd()
			printDemo(out, d, r, stripe, razorpay, cfg.GRPCAddr, cliCommand(exe, wd))
			fmt.Fprintf(out, "Ctrl-C stops Countersign and its PostgreSQL.\n\n")
			return cli.Serve(ctx, cfg, rs, log)
		},
	}
	cfg.BindServe(cmd.Flags())
	// The ledger is dev's own: hide the flag that would point it elsewhere.
	_ = cmd.Flags().MarkHidden("database-url")
	cmd.Flags().StringVar(&dir, "dir", ".countersign", "directory that keeps the dev PostgreSQL data")
	cmd.Flags().IntVar(&pgPort, "pg-port", 0, "PostgreSQL port on 127.0.0.1 (0 picks a free one)")
	cmd.Flags().StringVar(&mockAddr, "mockrail-addr", "127.0.0.1:12111", "where the in-process mock rail listens")
	cmd.Flags().StringVar(&egressAddr, "egress-addr", "127.0.0.1:15001", "where the demo egress proxy (Envoy's contract) listens for Stripe's API: a Stripe SDK's base URL")
	cmd.Flags().StringVar(&razorpayEgressAddr, "razorpay-egress-addr", "127.0.0.1:15002", "where the demo egress proxy listens for Razorpay's API: a Razorpay SDK's base URL")
	_ = cmd.Flags().MarkHidden("rails-file")
	return cmd
}

// devAuditName names the demo's audit signing key.
const devAuditName = "countersign-dev-audit"

// devAuditKey returns the demo's audit signer and verifier key files in
// keyDir, generating them on the first run.
func devAuditKey(keyDir string) (signer, verifier string, err error) {
	signer, verifier = filepath.Join(keyDir, devAuditName+".key"), filepath.Join(keyDir, devAuditName+".pub")
	if _, err := os.Stat(signer); err == nil {
		return signer, verifier, nil
	}
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return "", "", err
	}
	signer, verifier, _, err = audit.WriteKeyPair(keyDir, devAuditName)
	return signer, verifier, err
}

func isDuplicateDatabase(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P04"
}

// makeDir creates the dev directory. As root it is made 0711 so that the
// postgres OS user may pass through it to its data directory; the keys and
// the demo's secrets inside stay 0700/0600.
func makeDir(dir string) error {
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o711
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// absOr is dir made absolute, or dir when that fails.
func absOr(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// envoyInDir is dev's shown default for --envoy-addr: a socket in --dir.
const envoyInDir = "unix:DIR/envoy.sock"

// envoySocket is the Envoy listener's socket in dir, or in a new temporary
// directory when that path is too long for a socket.
func envoySocket(dir string) string {
	p := filepath.Join(absOr(dir), "envoy.sock")
	if len(p) > 100 {
		if tmp, err := os.MkdirTemp("", "cs-dev-"); err == nil {
			p = filepath.Join(tmp, "envoy.sock")
		}
	}
	return "unix:" + p
}

// consoleHost is addr as a browser should open it: a loopback address is
// written "localhost", which browsers treat as a secure context, so the
// console's Secure cookies are kept over plain HTTP in the demo.
func consoleHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
