package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
)

// errAuditBroken makes `audit verify` exit non-zero without repeating the
// report it printed.
var errAuditBroken = errors.New("audit chain verification failed")

func newAudit() *cobra.Command {
	audit := &cobra.Command{Use: "audit", Short: "Inspect the hash-chained audit log"}
	cfg := config.Defaults()
	var railAccount string
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Recompute every audit chain and name the first broken record",
		Long: "Verify walks each rail account's audit chain from its first record, recomputes every hash, " +
			"and checks the chain head. It prints the first broken record of each broken chain and exits 1. " +
			"--rail-account limits it to that account's 16 chains.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := Load(cmd, &cfg, config.Config.ValidateDatabase); err != nil {
				return err
			}
			store, err := ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := store.VerifyAuditOf(cmd.Context(), railAccount)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, b := range rep.Breaks {
				fmt.Fprintf(out, "BROKEN chain %s record %d: %s\n", b.Chain, b.Seq, b.Problem)
			}
			fmt.Fprintf(out, "%d chains, %d records, %d broken\n", rep.Chains, rep.Records, len(rep.Breaks))
			if len(rep.Breaks) > 0 {
				return errAuditBroken
			}
			return nil
		},
	}
	cfg.BindDatabase(verify.Flags())
	verify.Flags().StringVar(&railAccount, "rail-account", "", "verify only this rail account's chains (default: every chain)")
	audit.AddCommand(verify)
	return audit
}
