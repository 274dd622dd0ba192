package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
)

// errAuditBroken makes `audit verify` exit non-zero without repeating the
// report it printed.
var errAuditBroken = errors.New("audit log verification failed")

// errProofFailed makes a proof command exit non-zero after printing FAIL.
var errProofFailed = errors.New("audit proof verification failed")

func newAudit() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Keys, sealing, verification and proofs of the audit log"}
	cmd.AddCommand(newAuditKeygen(), newAuditSeal(), newAuditVerify(), newAuditInclusion(), newAuditConsistency())
	return cmd
}

func newAuditKeygen() *cobra.Command {
	var name, dir string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Generate the audit log's signing key and its verifier key",
		Long: "keygen writes DIR/NAME.key, the note signer key the sequencer signs checkpoints with (mode 0600: give it to " +
			"`countersign serve --audit-signing-key`), and DIR/NAME.pub, the verifier key anyone checks checkpoints and " +
			"proofs with (--audit-verifier-key). It never overwrites a file.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, pub, vkey, err := audit.WriteKeyPair(dir, name)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signer key   %s (secret)\nverifier key %s\n%s\n", key, pub, vkey)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the key's name, shown in every signature (e.g. audit.example.com)")
	cmd.Flags().StringVar(&dir, "out-dir", ".", "directory to write NAME.key and NAME.pub into")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func newAuditSeal() *cobra.Command {
	cfg := config.Defaults()
	var keyFile string
	cmd := &cobra.Command{
		Use:   "seal",
		Short: "Seal every unsealed audit record now (what serve's sequencer does each interval)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := Load(cmd, &cfg, config.Config.ValidateDatabase); err != nil {
				return err
			}
			signer, _, err := audit.LoadSigner(keyFile)
			if err != nil {
				return err
			}
			store, err := ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := store.Seal(cmd.Context(), signer)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sealed %d records of %d rail accounts\n", rep.Records, rep.Accounts)
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	cmd.Flags().StringVar(&keyFile, "audit-signing-key", "", "file holding the audit log's note signer key")
	_ = cmd.MarkFlagRequired("audit-signing-key")
	return cmd
}

func newAuditVerify() *cobra.Command {
	cfg := config.Defaults()
	var railAccount string
	var verifierFiles []string
	var maxAge time.Duration
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit log of every rail account, and name what is wrong",
		Long: "Verify reads the ledger (--database-url) in one snapshot and checks, per rail account: every sealed record " +
			"against the leaf it was sealed as; the tree rebuilt from the records against every signed checkpoint; every " +
			"checkpoint's signature (with --audit-verifier-key) and its consistency with the one before; that leaf indexes " +
			"run 0..size-1 with nothing sealed past the latest checkpoint; that each intent's records, sealed or not, form a " +
			"path of its states ending where the intent is; and that no record waited longer than --max-unsealed-age. " +
			"It prints one PROBLEM line for each finding and exits 1 if there is any.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := Load(cmd, &cfg, config.Config.ValidateDatabase); err != nil {
				return err
			}
			vs, err := audit.LoadVerifiers(verifierFiles)
			if err != nil {
				return err
			}
			store, err := ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			defer store.Close()
			rep, err := store.VerifyAudit(cmd.Context(), ledger.AuditVerifyOptions{RailAccount: railAccount, Verifiers: vs, MaxUnsealedAge: maxAge})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, p := range rep.Problems {
				fmt.Fprintf(out, "PROBLEM %s %s: %s\n", p.RailAccount, p.Kind, p.Problem)
			}
			if !rep.SignaturesChecked {
				fmt.Fprintln(out, "checkpoint signatures NOT checked: pass --audit-verifier-key")
			}
			fmt.Fprintf(out, "%d rail accounts, %d sealed records, %d unsealed, %d checkpoints, %d problems\n",
				rep.Accounts, rep.Sealed, rep.Unsealed, rep.Checkpoints, len(rep.Problems))
			if !rep.Ok() {
				return errAuditBroken
			}
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	cmd.Flags().StringVar(&railAccount, "rail-account", "", "verify only this rail account's log (default: every account)")
	cmd.Flags().StringArrayVar(&verifierFiles, "audit-verifier-key", nil, "file holding an audit verifier key (countersign audit keygen's NAME.pub); repeat it for the keys of earlier, rotated signing keys")
	cmd.Flags().DurationVar(&maxAge, "max-unsealed-age", time.Minute, "report records unsealed for longer than this (0: never)")
	return cmd
}

func newAuditInclusion() *cobra.Command {
	var f ownerFlags
	var verifierFiles []string
	var treeSize int64
	cmd := &cobra.Command{
		Use:   "inclusion RECORD_ID",
		Short: "Fetch a proof that one of your audit records is in the signed log, and verify it here",
		Long: "inclusion asks the owner API for the inclusion proof of audit record RECORD_ID (see the record ids in the " +
			"audit listing) against the latest checkpoint, or --tree-size, and verifies it locally: the checkpoint's " +
			"signature with --audit-verifier-key, the record's leaf hash recomputed from its fields, and the audit path to " +
			"the checkpoint's root. It prints ok or FAIL and exits 1 on FAIL.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("RECORD_ID must be a positive record id, got %q", args[0])
			}
			vs, err := audit.LoadVerifiers(verifierFiles)
			if err != nil {
				return err
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.client.GetAuditInclusionProof(ctx, &countersignv1.GetAuditInclusionProofRequest{RecordId: id, TreeSize: treeSize})
			if err != nil {
				return err
			}
			msg, err := checkInclusion(resp, vs, id, treeSize)
			return proofVerdict(cmd, msg, err)
		},
	}
	f.bind(cmd)
	cmd.Flags().StringArrayVar(&verifierFiles, "audit-verifier-key", nil, "file holding the audit verifier key (NAME.pub); repeat it for earlier, rotated keys")
	cmd.Flags().Int64Var(&treeSize, "tree-size", 0, "prove against the checkpoint of this size (default: the latest)")
	_ = cmd.MarkFlagRequired("audit-verifier-key")
	return cmd
}

// checkInclusion verifies an inclusion proof as the owner must: nothing the
// server says is believed unless the signed checkpoint and the record's own
// fields prove it.
func checkInclusion(resp *countersignv1.GetAuditInclusionProofResponse, vs []note.Verifier, id, treeSize int64) (string, error) {
	r := resp.GetRecord()
	c, err := audit.OpenCheckpoint(resp.GetCheckpoint().GetNote(), vs...)
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	switch {
	case r.GetRecordId() != id:
		return "", fmt.Errorf("the server answered with record %d, not %d", r.GetRecordId(), id)
	case c.Origin != audit.Origin(r.GetRailAccount()):
		return "", fmt.Errorf("the checkpoint is of log %q, not of rail account %s", c.Origin, r.GetRailAccount())
	case treeSize != 0 && c.Size != treeSize:
		return "", fmt.Errorf("the checkpoint has size %d, not %d", c.Size, treeSize)
	case r.LeafIndex == nil:
		return "", errors.New("the record has no leaf index")
	}
	rec := api.RecordOf(r)
	if h := rec.LeafHash(); r.GetLeafHash() != "" && r.GetLeafHash() != fmt.Sprintf("%x", h[:]) {
		return "", fmt.Errorf("the record's fields hash to %x, the server says %s", h[:], r.GetLeafHash())
	}
	proof, err := api.ProofHashes(resp.GetProof())
	if err != nil {
		return "", err
	}
	if err := audit.CheckInclusion(c, r.GetLeafIndex(), rec, proof); err != nil {
		return "", err
	}
	from := strings.TrimPrefix(r.GetFromState().String(), "INTENT_STATE_")
	return fmt.Sprintf("record %d (intent %s %s -> %s) is leaf %d of %s at tree size %d, checkpoint signed by a trusted key",
		id, r.GetSik(), from, strings.TrimPrefix(r.GetToState().String(), "INTENT_STATE_"), r.GetLeafIndex(), c.Origin, c.Size), nil
}

func newAuditConsistency() *cobra.Command {
	var f ownerFlags
	var verifierFiles []string
	var railAccount string
	var from, to int64
	cmd := &cobra.Command{
		Use:   "consistency",
		Short: "Fetch a proof that a rail account's log only grew between two checkpoints, and verify it here",
		Long: "consistency asks the owner API for the consistency proof of --rail-account's log from the checkpoint of size " +
			"--from to the checkpoint of size --to (default: the latest) and verifies it locally: both checkpoints' " +
			"signatures with --audit-verifier-key, and that the newer tree contains the older one unchanged. It prints ok " +
			"or FAIL and exits 1 on FAIL.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vs, err := audit.LoadVerifiers(verifierFiles)
			if err != nil {
				return err
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := c.client.GetAuditConsistencyProof(ctx, &countersignv1.GetAuditConsistencyProofRequest{RailAccount: railAccount, FromSize: from, ToSize: to})
			if err != nil {
				return err
			}
			msg, err := checkConsistency(resp, vs, railAccount, from, to)
			return proofVerdict(cmd, msg, err)
		},
	}
	f.bind(cmd)
	cmd.Flags().StringArrayVar(&verifierFiles, "audit-verifier-key", nil, "file holding the audit verifier key (NAME.pub); repeat it for earlier, rotated keys")
	cmd.Flags().StringVar(&railAccount, "rail-account", "", "the rail account whose log")
	cmd.Flags().Int64Var(&from, "from", 0, "size of the older checkpoint")
	cmd.Flags().Int64Var(&to, "to", 0, "size of the newer checkpoint (default: the latest)")
	for _, req := range []string{"audit-verifier-key", "rail-account", "from"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

func checkConsistency(resp *countersignv1.GetAuditConsistencyProofResponse, vs []note.Verifier, railAccount string, from, to int64) (string, error) {
	older, err := audit.OpenCheckpoint(resp.GetFrom().GetNote(), vs...)
	if err != nil {
		return "", fmt.Errorf("older checkpoint: %w", err)
	}
	newer, err := audit.OpenCheckpoint(resp.GetTo().GetNote(), vs...)
	if err != nil {
		return "", fmt.Errorf("newer checkpoint: %w", err)
	}
	switch {
	case older.Origin != audit.Origin(railAccount):
		return "", fmt.Errorf("the checkpoints are of log %q, not of rail account %s", older.Origin, railAccount)
	case older.Size != from:
		return "", fmt.Errorf("the older checkpoint has size %d, not %d", older.Size, from)
	case to != 0 && newer.Size != to:
		return "", fmt.Errorf("the newer checkpoint has size %d, not %d", newer.Size, to)
	}
	proof, err := api.ProofHashes(resp.GetProof())
	if err != nil {
		return "", err
	}
	if err := audit.CheckConsistency(older, newer, proof); err != nil {
		return "", err
	}
	return fmt.Sprintf("the log of %s at tree size %d extends it at tree size %d, both checkpoints signed by a trusted key",
		railAccount, newer.Size, older.Size), nil
}

func proofVerdict(cmd *cobra.Command, msg string, err error) error {
	if err != nil {
		fmt.Fprintf(cmd.OutOrStdout(), "FAIL: %v\n", err)
		return errProofFailed
	}
	fmt.Fprintf(cmd.OutOrStdout(), "ok: %s\n", msg)
	return nil
}
