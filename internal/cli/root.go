// Package cli is the countersign command: one binary with subcommands.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/logging"
)

// Version is set at build time with -ldflags "-X …/internal/cli.Version=v1.2.3".
var Version = "dev"

// NewRoot returns the root command writing to out and errOut, with extra
// subcommands beside the production ones (the demo binary adds `dev`).
func NewRoot(out, errOut io.Writer, extra ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   "countersign",
		Short: "Countersign guards an AI agent's payment calls: allow, hold or block, with a write-ahead ledger.",
		Long: "Countersign is a sidecar that answers Envoy's ext_authz for every outbound payment-API call an " +
			"agent makes. It runs deterministic gates, writes the intent to a Postgres ledger before the call " +
			"may leave, and never lets the same money move twice.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newServe(), newMigrate(), newAudit(), newReconcile(), newVersion(),
		newOwner(), newAgent(), newCredential(), newApprovals())
	root.AddCommand(newMandate())
	root.AddCommand(extra...)
	return root
}

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string, extra ...*cobra.Command) int {
	root := NewRoot(os.Stdout, os.Stderr, extra...)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "countersign:", err)
		return 1
	}
	return 0
}

// Load resolves and validates the configuration of cmd and builds its logger.
func Load(cmd *cobra.Command, cfg *config.Config, validate func(config.Config) error) (*slog.Logger, error) {
	if err := config.Resolve(cmd.Flags(), os.LookupEnv); err != nil {
		return nil, err
	}
	if err := validate(*cfg); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return logging.New(cmd.ErrOrStderr(), cfg.LogFormat, cfg.LogLevel), nil
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rev := "unknown"
			goVersion := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = s.Value
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "countersign %s (revision %s, %s)\n", Version, rev, goVersion)
			return nil
		},
	}
}
