package cli

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	var verifierFiles, keptFiles []string
	var maxAge time.Duration
	var insecure bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit log of every rail account, and name what is wrong",
		Long: "Verify reads the ledger (--database-url) in one snapshot and checks, per rail account: every sealed record " +
			"against the leaf it was sealed as; the tree rebuilt from the records against every signed checkpoint; every " +
			"checkpoint's signature with --audit-verifier-key (required: without a trusted key a log re-sealed with any key, and " +
			"a heartbeat signed by any key, would pass) and its consistency with the one before; that leaf indexes " +
			"run 0..size-1 with nothing sealed past the latest checkpoint; that each intent's records, sealed or not, form a " +
			"path of its states ending where the intent is, and that every record's intent still exists; that each intent " +
			"is the action its SIK was derived from (its SIK recomputed from its canonical form, its amount, currency, " +
			"subject and payee that form's); and that no record waited longer than --max-unsealed-age.\n\n" +
			"How long records waited is judged by this machine's clock against the sequencer's heartbeats (signed with the " +
			"audit signing key after each pass that sealed everything waiting), not by the records' own times or the " +
			"database's clock: records are stale when the newest valid heartbeat is older than --max-unsealed-age, or a " +
			"heartbeat older than that says they were sealed. The bound must exceed 30s plus the seal interval (a running " +
			"sequencer heartbeats every 30s when idle).\n\n" +
			"The ledger's own checkpoints prove nothing against whoever can write the ledger and run the sequencer: a log " +
			"removed and re-sealed from an edited history is signed with the real key. --trusted-checkpoint FILE names " +
			"checkpoints kept outside the ledger (from `audit inclusion|consistency --save-checkpoint`, or copied from " +
			"audit_checkpoints earlier); each must verify with --audit-verifier-key and be of a prefix of its account's " +
			"log now, else verify reports the log forked.\n\n" +
			"--insecure-no-signatures runs it without a verifier key: it says that no signature was checked, counts no " +
			"heartbeat (every unsealed record is then stale, unless --max-unsealed-age 0), and proves nothing about who " +
			"sealed the log.\n\n" +
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
			kept, err := loadKeptCheckpoints(keptFiles, vs)
			if err != nil {
				return err
			}
			switch {
			case len(vs) == 0 && !insecure:
				return errors.New("audit verify needs --audit-verifier-key: without a trusted key a log and heartbeats signed by any key would pass " +
					"(--insecure-no-signatures checks everything else and says no signature was checked)")
			case len(vs) > 0 && insecure:
				return errors.New("--insecure-no-signatures with --audit-verifier-key: give one or the other")
			}
			store, err := ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			defer store.Close()
			// Staleness is judged by this machine's clock, not the ledger's.
			rep, err := store.VerifyAudit(cmd.Context(), ledger.AuditVerifyOptions{RailAccount: railAccount, Verifiers: vs, MaxUnsealedAge: maxAge,
				Now: time.Now(), Kept: kept, CheckActions: true})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, p := range rep.Problems {
				fmt.Fprintf(out, "PROBLEM %s %s: %s\n", shown(p.RailAccount), p.Kind, shown(p.Problem))
			}
			if !rep.SignaturesChecked {
				fmt.Fprintln(out, "checkpoint and heartbeat signatures NOT checked (--insecure-no-signatures): a log re-sealed with any key would pass, and no heartbeat vouches for unsealed records")
			}
			if len(kept) > 0 {
				fmt.Fprintf(out, "%d of %d kept checkpoints checked against their logs\n", rep.KeptChecked, len(kept))
			} else {
				fmt.Fprintln(out, "no kept checkpoint given: a log re-sealed from an edited history would pass (pass --trusted-checkpoint)")
			}
			if rep.HeartbeatsIgnored > 0 {
				fmt.Fprintf(out, "%d sequencer heartbeats ignored: not validly signed, or their row misdescribes them (forged or altered)\n", rep.HeartbeatsIgnored)
			}
			if maxAge > 0 && rep.Unsealed > 0 && rep.NewestHeartbeatMicros != 0 {
				fmt.Fprintf(out, "newest valid sequencer heartbeat: %s\n", time.UnixMicro(rep.NewestHeartbeatMicros).UTC().Format(time.RFC3339))
			}
			if rep.AgentsUnchecked > 0 {
				fmt.Fprintf(out, "%d intents were born before their birth record named their agent (migration 00037): who made them is not checked\n", rep.AgentsUnchecked)
			}
			fmt.Fprintf(out, "%d rail accounts, %d sealed records, %d unsealed, %d checkpoints, %d problems\n",
				rep.Accounts, rep.Sealed, rep.Unsealed, rep.Checkpoints, len(rep.Problems))
			// Without a key (--insecure-no-signatures, said above) only the
			// findings count; with one, the report's own verdict.
			if len(rep.Problems) > 0 || (!rep.Ok() && !insecure) {
				return errAuditBroken
			}
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	cmd.Flags().StringVar(&railAccount, "rail-account", "", "verify only this rail account's log (default: every account)")
	cmd.Flags().StringArrayVar(&verifierFiles, "audit-verifier-key", nil, "file holding an audit verifier key (countersign audit keygen's NAME.pub); repeat it for the keys of earlier, rotated signing keys")
	cmd.Flags().DurationVar(&maxAge, "max-unsealed-age", time.Minute, "report records unsealed for longer than this, by this machine's clock and the sequencer's signed heartbeats (0: never; more than 30s plus the seal interval)")
	cmd.Flags().StringArrayVar(&keptFiles, "trusted-checkpoint", nil, "file holding signed checkpoints kept outside the ledger (one or several notes); the log must extend each; repeatable")
	cmd.Flags().BoolVar(&insecure, "insecure-no-signatures", false, "verify without --audit-verifier-key: no checkpoint or heartbeat signature is checked (a log re-sealed with any key passes), and it says so")
	return cmd
}

// loadKeptCheckpoints opens the checkpoints in files, each of which must
// verify with vs.
func loadKeptCheckpoints(files []string, vs []note.Verifier) ([]audit.Checkpoint, error) {
	var out []audit.Checkpoint
	for _, f := range files {
		raw, err := os.ReadFile(f) //nolint:gosec // the operator names the file
		if err != nil {
			return nil, fmt.Errorf("kept checkpoint: %w", err)
		}
		cs, err := audit.OpenCheckpoints(string(raw), vs...)
		if err != nil {
			return nil, fmt.Errorf("kept checkpoint %s: %w", f, err)
		}
		out = append(out, cs...)
	}
	return out, nil
}

// saveCheckpoint appends a signed checkpoint note (verified by the caller)
// to file, for a later --trusted-checkpoint or --from-checkpoint.
func saveCheckpoint(file, signed string) error {
	if file == "" {
		return nil
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644) //nolint:gosec // the owner names the file; checkpoints are public
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if !strings.HasSuffix(signed, "\n") {
		signed += "\n"
	}
	if _, err := f.WriteString(signed + "\n"); err != nil {
		_ = f.Close()
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return f.Close()
}

func newAuditInclusion() *cobra.Command {
	var f ownerFlags
	var verifierFiles []string
	var treeSize int64
	var saveFile string
	cmd := &cobra.Command{
		Use:   "inclusion RECORD_ID",
		Short: "Fetch a proof that one of your audit records is in the signed log, and verify it here",
		Long: "inclusion asks the owner API for the inclusion proof of audit record RECORD_ID (see the record ids in the " +
			"audit listing) against the latest checkpoint, or --tree-size, and verifies it locally: the checkpoint's " +
			"signature with --audit-verifier-key, the record's leaf hash recomputed from its fields, and the audit path to " +
			"the checkpoint's root. It prints ok or FAIL and exits 1 on FAIL. With --save-checkpoint FILE it appends the " +
			"verified checkpoint to FILE, to hold the log to later (audit consistency --from-checkpoint).",
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
			if err == nil {
				if err := saveCheckpoint(saveFile, resp.GetCheckpoint().GetNote()); err != nil {
					return err
				}
			}
			return proofVerdict(cmd, msg, err)
		},
	}
	f.bind(cmd)
	cmd.Flags().StringArrayVar(&verifierFiles, "audit-verifier-key", nil, "file holding the audit verifier key (NAME.pub); repeat it for earlier, rotated keys")
	cmd.Flags().Int64Var(&treeSize, "tree-size", 0, "prove against the checkpoint of this size (default: the latest)")
	cmd.Flags().StringVar(&saveFile, "save-checkpoint", "", "append the verified checkpoint to this file (keep it: see audit consistency --from-checkpoint)")
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
		return "", fmt.Errorf("the record's fields hash to %x, the server says %s", h[:], shown(r.GetLeafHash()))
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
	var railAccount, fromFile, saveFile string
	var from, to int64
	cmd := &cobra.Command{
		Use:   "consistency",
		Short: "Fetch a proof that a rail account's log only grew between two checkpoints, and verify it here",
		Long: "consistency asks the owner API for the consistency proof of --rail-account's log from the checkpoint of size " +
			"--from to the checkpoint of size --to (default: the latest) and verifies it locally: both checkpoints' " +
			"signatures with --audit-verifier-key, and that the newer tree contains the older one unchanged.\n\n" +
			"With --from the older checkpoint is the server's own, so a log the server's operator removed and re-sealed " +
			"from an edited history passes. --from-checkpoint FILE holds the log to checkpoints you kept instead (FILE may " +
			"hold several; those of --rail-account are checked): each must verify with --audit-verifier-key, and the " +
			"server's latest tree must contain it unchanged. --save-checkpoint FILE appends the verified newer checkpoint " +
			"to FILE (it may be the --from-checkpoint file). It prints ok or FAIL and exits 1 on FAIL.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (from == 0) == (fromFile == "") {
				return errors.New("name the older checkpoint: --from SIZE (the server's) or --from-checkpoint FILE (one you kept)")
			}
			vs, err := audit.LoadVerifiers(verifierFiles)
			if err != nil {
				return err
			}
			var kept []audit.Checkpoint
			if fromFile != "" {
				all, err := loadKeptCheckpoints([]string{fromFile}, vs)
				if err != nil {
					return err
				}
				for _, k := range all {
					if k.Origin == audit.Origin(railAccount) {
						kept = append(kept, k)
					}
				}
				if len(kept) == 0 {
					return fmt.Errorf("%s holds no checkpoint of rail account %s", fromFile, railAccount)
				}
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if fromFile == "" {
				resp, err := c.client.GetAuditConsistencyProof(ctx, &countersignv1.GetAuditConsistencyProofRequest{RailAccount: railAccount, FromSize: from, ToSize: to})
				if err != nil {
					return err
				}
				msg, err := checkConsistency(resp, vs, railAccount, from, to)
				if err == nil {
					if err := saveCheckpoint(saveFile, resp.GetTo().GetNote()); err != nil {
						return err
					}
				}
				return proofVerdict(cmd, msg, err)
			}
			var msgs []string
			var newest string
			for _, k := range kept {
				resp, err := c.client.GetAuditConsistencyProof(ctx, &countersignv1.GetAuditConsistencyProofRequest{RailAccount: railAccount, FromSize: k.Size, ToSize: to})
				if err != nil {
					if code := status.Code(err); code != codes.NotFound && code != codes.InvalidArgument {
						return err
					}
					// The server has no checkpoint of the kept size, or only
					// smaller trees: the log it serves is not the one kept.
					return proofVerdict(cmd, "", fmt.Errorf("the server proves nothing from the kept checkpoint of size %d (%s): the log was rewritten or truncated",
						k.Size, status.Convert(err).Message()))
				}
				msg, err := checkKeptConsistency(resp, vs, k, railAccount, to)
				if err != nil {
					return proofVerdict(cmd, "", err)
				}
				msgs, newest = append(msgs, msg), resp.GetTo().GetNote()
			}
			if err := saveCheckpoint(saveFile, newest); err != nil {
				return err
			}
			return proofVerdict(cmd, strings.Join(msgs, "; "), nil)
		},
	}
	f.bind(cmd)
	cmd.Flags().StringArrayVar(&verifierFiles, "audit-verifier-key", nil, "file holding the audit verifier key (NAME.pub); repeat it for earlier, rotated keys")
	cmd.Flags().StringVar(&railAccount, "rail-account", "", "the rail account whose log")
	cmd.Flags().Int64Var(&from, "from", 0, "size of the older checkpoint, as the server has it")
	cmd.Flags().StringVar(&fromFile, "from-checkpoint", "", "file holding the older checkpoint(s), as you kept them (instead of --from)")
	cmd.Flags().Int64Var(&to, "to", 0, "size of the newer checkpoint (default: the latest)")
	cmd.Flags().StringVar(&saveFile, "save-checkpoint", "", "append the verified newer checkpoint to this file")
	for _, req := range []string{"audit-verifier-key", "rail-account"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

// checkKeptConsistency verifies that the server's newer checkpoint extends
// the checkpoint k the owner kept: the server's own older checkpoint is
// not believed (it may be of a rewritten log), only compared.
func checkKeptConsistency(resp *countersignv1.GetAuditConsistencyProofResponse, vs []note.Verifier, k audit.Checkpoint, railAccount string, to int64) (string, error) {
	newer, err := audit.OpenCheckpoint(resp.GetTo().GetNote(), vs...)
	if err != nil {
		return "", fmt.Errorf("newer checkpoint: %w", err)
	}
	switch {
	case newer.Origin != k.Origin:
		return "", fmt.Errorf("the newer checkpoint is of log %q, not of rail account %s", newer.Origin, railAccount)
	case to != 0 && newer.Size != to:
		return "", fmt.Errorf("the newer checkpoint has size %d, not %d", newer.Size, to)
	}
	if older, err := audit.OpenCheckpoint(resp.GetFrom().GetNote(), vs...); err == nil && older.Size == k.Size && older.Root != k.Root {
		return "", fmt.Errorf("the server's checkpoint of size %d has root %s, the kept one %s: the log forked (it was rewritten and re-signed)",
			k.Size, older.Root, k.Root)
	}
	proof, err := api.ProofHashes(resp.GetProof())
	if err != nil {
		return "", err
	}
	if err := audit.CheckConsistency(k, newer, proof); err != nil {
		return "", fmt.Errorf("the log does not extend the kept checkpoint: %w", err)
	}
	return fmt.Sprintf("the log of %s at tree size %d extends the kept checkpoint of tree size %d, signed by a trusted key",
		railAccount, newer.Size, k.Size), nil
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
