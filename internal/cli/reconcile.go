package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/reconcile"
)

func newReconcile() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Run one reconciliation pass: settle due ambiguous intents against the rail",
		Long: "Reconcile expires stale attempt leases, then claims the intents whose outcome is ambiguous and " +
			"due, lists what the rail really did (paging to exhaustion, matching on the stamp only) and records " +
			"the finding. It is the single-pass form of the reconciler that `serve` runs continuously.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := Load(cmd, &cfg, config.Config.ValidateEngine)
			if err != nil {
				return err
			}
			rs, err := loadRails(cfg)
			if err != nil {
				return err
			}
			store, err := ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 4, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			defer store.Close()
			w := reconcile.New(store, rs, reconcile.Options{Owner: leaseOwner(cfg), Delay: cfg.ReconcileDelay,
				MaxAttempts: cfg.ReconcileMaxAttempts, ClaimTTL: cfg.ReconcileClaimTTL}, log)
			rep, err := w.Pass(cmd.Context(), nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, r := range rep.Results {
				fmt.Fprintf(out, "%s/%s %s -> %s (%d pages) %s\n", shown(r.Key.RailAccount), r.Key.SIK, r.Outcome, r.State, r.Pages, shown(r.Detail))
			}
			fmt.Fprintf(out, "expired %d leases; reconciled %d: %d applied, %d absent, %d inconclusive, %d quarantined\n",
				rep.Expired, rep.Claimed, rep.Applied, rep.Absent, rep.Inconclusive, rep.Quarantined)
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	cfg.BindEngine(cmd.Flags())
	return cmd
}
