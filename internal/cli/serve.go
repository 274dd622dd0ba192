package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/server"
	"github.com/countersign/countersign/internal/telemetry"
)

func newServe() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve ext_authz, the countersign.v1 API, REST, health and metrics",
		Long: "Serve listens on the Envoy address (ext_authz, ext_proc), the gRPC address (countersign.v1, grpc.health.v1) " +
			"and the HTTP address (REST, /metrics, /healthz, /readyz, /openapi.json). It does not migrate: " +
			"it reports not-ready while the ledger is unreachable or its schema is behind.\n\n" +
			"Every flag can also be set with COUNTERSIGN_<FLAG> (e.g. COUNTERSIGN_DATABASE_URL) or in --config.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := Load(cmd, &cfg, config.Config.Validate)
			if err != nil {
				return err
			}
			rs, err := loadRails(cfg)
			if err != nil {
				return err
			}
			for _, w := range rs.Warnings() {
				log.Warn(w)
			}
			return Serve(cmd.Context(), cfg, rs, log)
		},
	}
	cfg.BindServe(cmd.Flags())
	return cmd
}

// Serve runs a server over the configured ledger until ctx ends. Traces
// are exported over OTLP when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// _TRACES_ENDPOINT) variable is set, and flushed on the way out.
func Serve(ctx context.Context, cfg config.Config, rs *rails.Registry, log *slog.Logger) error {
	tp, err := telemetry.Setup(ctx, os.LookupEnv, Version)
	if err != nil {
		return err
	}
	defer func() {
		// A collector that is down costs the spans, never the exit status.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if ferr := tp.Shutdown(fctx); ferr != nil {
			log.Warn("traces not flushed", "err", ferr)
		}
	}()
	opts := ledger.Options{MaxConns: cfg.DBMaxConns, Pooler: cfg.DBPooler}
	var serverOpts []server.Option
	if tp.Exporting {
		// Without an exporter nothing is traced at all: no spans, no cost.
		log.Info("exporting traces over OTLP")
		opts.Tracer = telemetry.NewPgxTracer(tp)
		serverOpts = append(serverOpts, server.WithTracerProvider(tp))
	}
	store, err := ledger.Open(ctx, cfg.DatabaseURL, opts)
	if err != nil {
		return err
	}
	defer store.Close()
	cfg.LeaseOwner = leaseOwner(cfg)
	srv, err := server.New(cfg, store, rs, log, serverOpts...)
	if err != nil {
		return err
	}
	if err := srv.Run(ctx); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func newMigrate() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the ledger's pending schema migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := Load(cmd, &cfg, config.Config.ValidateDatabase)
			if err != nil {
				return err
			}
			if cfg.DBPooler == ledger.PoolerPgBouncer {
				// goose serialises migrators with a session advisory lock,
				// which a transaction pooler cannot keep on one session.
				return fmt.Errorf("migrate needs a session of its own: point --database-url at PostgreSQL itself, not through %s (--db-pooler=none)", cfg.DBPooler)
			}
			res, err := ledger.Migrate(cmd.Context(), cfg.DatabaseURL, log)
			if err != nil {
				return err
			}
			for _, r := range res {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %05d %s\n", r.Version, r.Source)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ledger schema at version %d\n", ledger.LatestVersion())
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	return cmd
}
