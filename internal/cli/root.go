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
	root.SetFlagErrorFunc(suggestFlag)
	root.AddCommand(newServe(), newMigrate(), newAudit(), newReconcile(), newVersion(),
		newOwner(), newAgent(), newCredential(), newApprovals(), newIntents(), newInject(), newProbe())
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
	cfg.ApplyPoolerDefaults(cmd.Flags())
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
			bi, _ := debug.ReadBuildInfo()
			fmt.Fprintln(cmd.OutOrStdout(), versionLine(Version, bi))
			return nil
		},
	}
}

// versionLine says which build this is: the version set at link time, else
// the module version Go stamped, and the VCS revision it was built from.
// A binary built without VCS stamping (go run, -buildvcs=false, a tree
// without .git) says so instead of guessing.
func versionLine(linked string, bi *debug.BuildInfo) string {
	version, goVersion := linked, "unknown Go"
	rev, modified := "", ""
	if bi != nil {
		goVersion = bi.GoVersion
		if (version == "" || version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	switch {
	case rev == "":
		return fmt.Sprintf("countersign %s (%s; built without VCS information: build with `make build` or `go build -buildvcs=auto` in a git checkout)", version, goVersion)
	case modified == "true":
		return fmt.Sprintf("countersign %s (revision %s with uncommitted changes, %s)", version, rev, goVersion)
	default:
		return fmt.Sprintf("countersign %s (revision %s, %s)", version, rev, goVersion)
	}
}
