package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/sik"
)

// AuditProblemKind names what a verification found wrong.
type AuditProblemKind string

// The problems VerifyAudit reports.
const (
	// A sealed record's fields no longer hash to the leaf sealed at its index.
	AuditAltered AuditProblemKind = "altered"
	// A sealed record sits at a leaf index whose sealed hash is another
	// record's: records were moved (their leaf indexes swapped or renumbered).
	AuditReordered AuditProblemKind = "reordered"
	// Leaf indexes below the checkpoint's size hold no record: sealed
	// records were deleted.
	AuditMissing AuditProblemKind = "missing"
	// A record has a leaf index at or past the latest checkpoint's size.
	AuditBeyondCheckpoint AuditProblemKind = "beyond-checkpoint"
	// The tree rebuilt from the records is not the checkpoint's tree.
	AuditRootMismatch AuditProblemKind = "root-mismatch"
	// The stored tree hashes do not give the checkpoint's root (proofs
	// served from them would fail).
	AuditStoredHashes AuditProblemKind = "stored-hashes"
	// A checkpoint's signature by the trusted key does not verify.
	AuditBadSignature AuditProblemKind = "bad-signature"
	// A checkpoint is not signed by the trusted key at all.
	AuditUntrustedSigner AuditProblemKind = "untrusted-signer"
	// A checkpoint cannot be read, or is not what its row says it is.
	AuditMalformedCheckpoint AuditProblemKind = "malformed-checkpoint"
	// A checkpoint's tree does not extend the previous checkpoint's.
	AuditInconsistent AuditProblemKind = "inconsistent"
	// An intent's records do not form a continuous path of its states.
	AuditPathBroken AuditProblemKind = "path-broken"
	// A record is not a birth or a transition the state machine allows.
	AuditIllegalTransition AuditProblemKind = "illegal-transition"
	// Records have waited for sealing longer than the bound.
	AuditStaleUnsealed AuditProblemKind = "stale-unsealed"
	// A checkpoint the caller kept is not of a prefix of the log: the
	// log was rewritten (re-sealed from another history) or truncated.
	AuditForked AuditProblemKind = "forked"
	// An intent's row is not the action its SIK was derived from: its
	// SIK, amount, currency, subject, payee or reason was changed.
	AuditActionMismatch AuditProblemKind = "action-mismatch"
)

// AuditProblem is one thing wrong with a rail account's audit log.
// RecordID, LeafIndex and TreeSize are set where they apply (else -1 / 0).
type AuditProblem struct {
	RailAccount string
	Kind        AuditProblemKind
	RecordID    int64
	LeafIndex   int64
	TreeSize    int64
	SIK         string
	Problem     string
}

func (p AuditProblem) Error() string {
	return fmt.Sprintf("audit log of %s: %s: %s", p.RailAccount, p.Kind, p.Problem)
}

// AuditVerifyOptions say what to verify and against what.
type AuditVerifyOptions struct {
	// RailAccount limits verification to one account ("" verifies every
	// account with audit records or checkpoints).
	RailAccount string
	// Verifiers are the trusted keys (several across a rotation); a
	// checkpoint must verify with one of them. None checks no signature
	// (the report says so in SignaturesChecked).
	Verifiers []note.Verifier
	// MaxUnsealedAge reports records unsealed for longer; 0 reports none.
	MaxUnsealedAge time.Duration
	// Kept are checkpoints kept outside the ledger (by an owner, an
	// auditor), already verified with the trusted keys: each must be of a
	// prefix of its account's log now, else the log was rewritten and
	// re-signed. A kept checkpoint names its account, which is verified
	// even if the ledger holds nothing of it any more.
	Kept []audit.Checkpoint
	// CheckActions checks each intent against the action it was keyed
	// from: its SIK is the SIK of its canonical column, and its rail
	// account, action, subject, amount, currency, payee and distinct
	// reason are the canonical action's (the sealed records name the
	// intent by SIK only, so this is what ties them to what it does).
	CheckActions bool
}

// AuditReport is the result of verifying audit logs.
type AuditReport struct {
	Accounts          int
	Sealed            int64 // sealed records checked
	Unsealed          int64 // records not sealed yet (their path is still checked)
	TreeSize          int64 // the latest checkpoint's size (of the one account, or summed)
	Checkpoints       int
	SignaturesChecked bool
	// KeptChecked counts the kept checkpoints checked against their log
	// (those of accounts outside RailAccount are not).
	KeptChecked int
	// OldestUnsealedMicros is when the oldest unsealed record was written
	// (0 if none).
	OldestUnsealedMicros int64
	Problems             []AuditProblem
}

// Ok says nothing is wrong.
func (r AuditReport) Ok() bool { return len(r.Problems) == 0 }

// VerifyAudit verifies the audit logs opts names, reading one consistent
// snapshot: every sealed record against its leaf, the tree against every
// checkpoint, every checkpoint's signature and its consistency with the
// previous one, that leaf indexes run 0..size-1 with nothing sealed past
// the latest checkpoint, that each intent's records form a path of its
// states ending where the intent is, and how long records stay unsealed.
func (s *Store) VerifyAudit(ctx context.Context, opts AuditVerifyOptions) (AuditReport, error) {
	rep := AuditReport{SignaturesChecked: len(opts.Verifiers) > 0}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT rail_account FROM audit_records WHERE $1 = '' OR rail_account = $1
			UNION SELECT rail_account FROM audit_checkpoints WHERE $1 = '' OR rail_account = $1 ORDER BY 1`, opts.RailAccount)
		if err != nil {
			return err
		}
		accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, k := range opts.Kept {
			if acct, ok := audit.RailAccountOf(k.Origin); ok && (opts.RailAccount == "" || acct == opts.RailAccount) && !slices.Contains(accounts, acct) {
				accounts = append(accounts, acct)
			}
		}
		slices.Sort(accounts)
		var now int64
		if err := tx.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`).Scan(&now); err != nil {
			return err
		}
		for _, acct := range accounts {
			rep.Accounts++
			if err := verifyAccount(ctx, tx, acct, opts, now, &rep); err != nil {
				return err
			}
		}
		return nil
	})
	return rep, classify(err)
}

// verifyAccount verifies one rail account's log into rep.
func verifyAccount(ctx context.Context, tx pgx.Tx, acct string, opts AuditVerifyOptions, now int64, rep *AuditReport) error {
	problem := func(kind AuditProblemKind, recordID, leaf, size int64, sik, format string, args ...any) {
		rep.Problems = append(rep.Problems, AuditProblem{RailAccount: acct, Kind: kind, RecordID: recordID, LeafIndex: leaf,
			TreeSize: size, SIK: sik, Problem: fmt.Sprintf(format, args...)})
	}
	rows, err := tx.Query(ctx, `SELECT `+auditRecordColumns+` FROM audit_records r WHERE r.rail_account = $1
		ORDER BY r.leaf_index NULLS LAST, r.id`, acct)
	if err != nil {
		return err
	}
	recs, err := pgx.CollectRows(rows, scanAuditRecord)
	if err != nil {
		return err
	}
	stored := map[int64]tlog.Hash{}
	rows, err = tx.Query(ctx, `SELECT idx, hash FROM audit_hashes WHERE rail_account = $1`, acct)
	if err != nil {
		return err
	}
	for rows.Next() {
		var i int64
		var b []byte
		if err := rows.Scan(&i, &b); err != nil {
			rows.Close()
			return err
		}
		var h tlog.Hash
		copy(h[:], b)
		stored[i] = h
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT rail_account, tree_size, note FROM audit_checkpoints WHERE rail_account = $1 ORDER BY tree_size`, acct)
	if err != nil {
		return err
	}
	cps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditCheckpoint, error) {
		var c AuditCheckpoint
		err := r.Scan(&c.RailAccount, &c.TreeSize, &c.Note)
		return c, err
	})
	if err != nil {
		return err
	}
	var logSize int64
	if err := tx.QueryRow(ctx, `SELECT COALESCE((SELECT tree_size FROM audit_logs WHERE rail_account = $1), 0)`, acct).Scan(&logSize); err != nil {
		return err
	}

	// Checkpoints: signature, shape, and what the row says.
	origin := audit.Origin(acct)
	var trees []audit.Checkpoint // readable checkpoints, by size
	for _, c := range cps {
		rep.Checkpoints++
		cp, err := audit.OpenCheckpoint(c.Note, opts.Verifiers...)
		switch {
		case errors.Is(err, audit.ErrBadSignature):
			problem(AuditBadSignature, -1, -1, c.TreeSize, "", "checkpoint of size %d: %v (altered or forged)", c.TreeSize, err)
			cp, err = audit.OpenCheckpoint(c.Note)
		case errors.Is(err, audit.ErrUntrustedSigner):
			problem(AuditUntrustedSigner, -1, -1, c.TreeSize, "", "checkpoint of size %d: %v", c.TreeSize, err)
			cp, err = audit.OpenCheckpoint(c.Note)
		}
		if err != nil {
			problem(AuditMalformedCheckpoint, -1, -1, c.TreeSize, "", "checkpoint of size %d: %v", c.TreeSize, err)
			continue
		}
		if cp.Size != c.TreeSize || cp.Origin != origin {
			problem(AuditMalformedCheckpoint, -1, -1, c.TreeSize, "", "checkpoint stored as size %d of %q says size %d of %q",
				c.TreeSize, origin, cp.Size, cp.Origin)
			continue
		}
		trees = append(trees, cp)
	}
	var latest audit.Checkpoint
	if len(trees) > 0 {
		latest = trees[len(trees)-1]
	}
	rep.TreeSize += latest.Size
	if logSize > latest.Size {
		problem(AuditMissing, -1, -1, logSize, "", "the log's head says %d leaves, the latest checkpoint has %d (checkpoints were removed)", logSize, latest.Size)
	}

	// Leaves: contiguous, each hashing to what was sealed at its index.
	sealedAt := map[tlog.Hash]int64{} // sealed leaf hash → its index
	for i := range max(latest.Size, logSize) {
		if h, ok := stored[tlog.StoredHashIndex(0, i)]; ok {
			sealedAt[h] = i
		}
	}
	leaves := make([]tlog.Hash, latest.Size)
	present := make([]bool, latest.Size)
	var next int64
	var unsealed []AuditRecord
	for _, r := range recs {
		if r.LeafIndex == nil {
			unsealed = append(unsealed, r)
			continue
		}
		rep.Sealed++
		i := *r.LeafIndex
		if i > next && next < latest.Size {
			problem(AuditMissing, -1, next, latest.Size, "", "leaves %d to %d hold no record (sealed records were deleted)", next, min(i, latest.Size)-1)
		}
		next = i + 1
		if i >= latest.Size {
			problem(AuditBeyondCheckpoint, r.ID, i, latest.Size, r.SIK, "record %d has leaf index %d, outside the latest checkpoint (size %d)", r.ID, i, latest.Size)
			continue
		}
		h := r.Leaf().LeafHash()
		leaves[i], present[i] = h, true
		if want, ok := stored[tlog.StoredHashIndex(0, i)]; ok && want != h {
			if j, moved := sealedAt[h]; moved {
				problem(AuditReordered, r.ID, i, latest.Size, r.SIK, "record %d is at leaf %d, but it was sealed as leaf %d (records were reordered)", r.ID, i, j)
			} else {
				problem(AuditAltered, r.ID, i, latest.Size, r.SIK, "record %d (leaf %d): its fields do not hash to the sealed leaf (the record was altered)", r.ID, i)
			}
		}
	}
	if next < latest.Size {
		problem(AuditMissing, -1, next, latest.Size, "", "leaves %d to %d hold no record (sealed records were deleted)", next, latest.Size-1)
	}

	// The tree rebuilt from the records must be every checkpoint's tree;
	// consecutive checkpoints must be consistent in the stored tree.
	complete := true
	for _, p := range present {
		complete = complete && p
	}
	var rebuilt tlog.HashReader
	if complete && latest.Size > 0 {
		if rebuilt, err = rebuildTree(leaves); err != nil {
			return err
		}
		for _, c := range trees {
			root, err := tlog.TreeHash(c.Size, rebuilt)
			if err != nil {
				return err
			}
			if root != c.Root {
				problem(AuditRootMismatch, -1, -1, c.Size, "", "the tree rebuilt from the first %d records has root %s, the checkpoint of size %d says %s",
					c.Size, root, c.Size, c.Root)
			}
		}
	}
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for j, i := range idx {
			h, ok := stored[i]
			if !ok {
				return nil, fmt.Errorf("stored hash %d is missing", i)
			}
			out[j] = h
		}
		return out, nil
	})
	if latest.Size > 0 {
		if root, err := tlog.TreeHash(latest.Size, reader); err != nil || root != latest.Root {
			problem(AuditStoredHashes, -1, -1, latest.Size, "", "the stored tree hashes do not give the root of the checkpoint of size %d (%v)", latest.Size, err)
		}
	}
	for k := 1; k < len(trees); k++ {
		older, newer := trees[k-1], trees[k]
		proof, err := tlog.ProveTree(newer.Size, older.Size, reader)
		if err == nil {
			err = audit.CheckConsistency(older, newer, proof)
		}
		if err != nil {
			problem(AuditInconsistent, -1, -1, newer.Size, "", "checkpoint of size %d is not consistent with checkpoint of size %d: %v", newer.Size, older.Size, err)
		}
	}
	// Kept checkpoints: the log now must extend each, proved from the tree
	// rebuilt from the records when it is whole, else from the stored one.
	proofs := tlog.HashReader(reader)
	if rebuilt != nil {
		proofs = rebuilt
	}
	for _, k := range opts.Kept {
		if k.Origin != origin {
			continue
		}
		rep.KeptChecked++
		if err := extendsKept(k, latest, proofs); err != nil {
			problem(AuditForked, -1, -1, k.Size, "", "the kept checkpoint of size %d (root %s): %v: the log was rewritten or truncated since", k.Size, k.Root, err)
		}
	}

	// Each intent's records, sealed ones in leaf order then unsealed ones
	// in id order, are a path from birth to where the intent stands.
	rep.Unsealed += int64(len(unsealed))
	var stale int64
	var oldest AuditRecord
	for _, r := range unsealed {
		if oldest.ID == 0 || r.AtMicros < oldest.AtMicros {
			oldest = r
		}
		if opts.MaxUnsealedAge > 0 && now-r.AtMicros > opts.MaxUnsealedAge.Microseconds() {
			stale++
		}
	}
	if oldest.ID != 0 && (rep.OldestUnsealedMicros == 0 || oldest.AtMicros < rep.OldestUnsealedMicros) {
		rep.OldestUnsealedMicros = oldest.AtMicros
	}
	if stale > 0 {
		problem(AuditStaleUnsealed, oldest.ID, -1, 0, oldest.SIK, "%d records unsealed for longer than %s (the oldest, record %d, since %s): is a sequencer running with a signing key?",
			stale, opts.MaxUnsealedAge, oldest.ID, time.UnixMicro(oldest.AtMicros).UTC().Format(time.RFC3339))
	}
	rows, err = tx.Query(ctx, `SELECT sik, state, action, subject, amount_minor, currency, payee, distinct_reason, canonical
		FROM intents WHERE rail_account = $1`, acct)
	if err != nil {
		return err
	}
	intents, err := pgx.CollectRows(rows, pgx.RowToStructByPos[intentRow])
	if err != nil {
		return err
	}
	states := map[string]string{}
	for _, it := range intents {
		states[it.SIK] = it.State
	}
	if opts.CheckActions {
		for _, it := range intents {
			for _, why := range checkIntentAction(acct, it) {
				problem(AuditActionMismatch, -1, -1, 0, it.SIK, "intent %s: %s (the intent was edited after it was keyed)", it.SIK, why)
			}
		}
	}
	last := map[string]AuditRecord{}
	for _, r := range recs {
		prev, seen := last[r.SIK]
		switch {
		case !seen && r.FromState != "":
			problem(AuditPathBroken, r.ID, leafOf(r), 0, r.SIK, "intent %s: its first record (%d) starts from %s, not from its birth (earlier records are missing)", r.SIK, r.ID, r.FromState)
		case !seen && !legalBirth(r):
			problem(AuditIllegalTransition, r.ID, leafOf(r), 0, r.SIK, "intent %s: its birth record (%d) is '' → %s by %s (attempt %d); an intent is born PROPOSED, or IN_FLIGHT by its first attempt's start",
				r.SIK, r.ID, r.ToState, r.Event, r.AttemptSeq)
		case seen && r.FromState != prev.ToState:
			problem(AuditPathBroken, r.ID, leafOf(r), 0, r.SIK, "intent %s: record %d goes from %s, but the record before it (%d) ends at %s (a record between them is missing or out of order)",
				r.SIK, r.ID, r.FromState, prev.ID, prev.ToState)
		case seen && !legalEdge(r):
			problem(AuditIllegalTransition, r.ID, leafOf(r), 0, r.SIK, "intent %s: record %d moves %s → %s by %s, which the intent state machine does not allow",
				r.SIK, r.ID, r.FromState, r.ToState, r.Event)
		}
		last[r.SIK] = r
	}
	for _, k := range slices.Sorted(maps.Keys(states)) {
		st := states[k]
		r, ok := last[k]
		switch {
		case !ok:
			problem(AuditPathBroken, -1, -1, 0, k, "intent %s is %s but has no audit record", k, st)
		case r.ToState != st:
			problem(AuditPathBroken, r.ID, leafOf(r), 0, k, "intent %s is %s, but its last record (%d) ends at %s (later records are missing)", k, st, r.ID, r.ToState)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(last)) {
		if _, ok := states[k]; !ok {
			r := last[k]
			problem(AuditPathBroken, r.ID, leafOf(r), 0, k, "intent %s has audit records (the last, %d, ends at %s) but no intent row (the intent was deleted)", k, r.ID, r.ToState)
		}
	}
	return nil
}

// extendsKept says why the log whose latest checkpoint is latest, over
// hashes, does not extend the kept checkpoint k (nil if it does).
func extendsKept(k, latest audit.Checkpoint, hashes tlog.HashReader) error {
	switch {
	case k.Size == 0:
		return nil
	case k.Size > latest.Size:
		return fmt.Errorf("the log's latest checkpoint has only %d leaves", latest.Size)
	case k.Size == latest.Size && k.Root != latest.Root:
		return fmt.Errorf("the log's checkpoint of that size has root %s", latest.Root)
	}
	proof, err := tlog.ProveTree(latest.Size, k.Size, hashes)
	if err == nil {
		err = audit.CheckConsistency(k, latest, proof)
	}
	if err != nil {
		return fmt.Errorf("the log at size %d does not extend it (%w)", latest.Size, err)
	}
	return nil
}

// intentRow is what verification reads of an intent.
type intentRow struct {
	SIK, State, Action, Subject string
	AmountMinor                 int64
	Currency, Payee, Distinct   string
	Canonical                   string
}

// checkIntentAction says how it is not the action its canonical column
// holds, in the engine's terms (engine.Propose keys sik.Action and writes
// the intent from the same values): the SIK is sik.KeyOfCanonical of the
// canonical form, which is the RFC 8785 form of a valid sik.Action on this
// rail account; the intent's action, subject, currency and distinct
// reason are the action's; its amount is the action's unless the action
// is a full refund ("amount": "full", valued at what was refundable when
// proposed, which no key covers); its payee is its subject for a payout or
// transfer and none for a refund.
func checkIntentAction(acct string, it intentRow) []string {
	var a sik.Action
	dec := json.NewDecoder(strings.NewReader(it.Canonical))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return []string{fmt.Sprintf("its canonical column is not an action (%v)", err)}
	}
	canon, err := a.Canonical()
	if err != nil {
		return []string{fmt.Sprintf("its canonical column is not a valid action (%v)", err)}
	}
	var why []string
	if string(canon) != it.Canonical {
		why = append(why, "its canonical column is not in canonical form")
	}
	if k := sik.KeyOfCanonical([]byte(it.Canonical)); string(k) != it.SIK {
		why = append(why, fmt.Sprintf("its SIK is not the SIK of its canonical action (%s)", k))
	}
	differs := func(field, row, canonical string) {
		if row != canonical {
			why = append(why, fmt.Sprintf("its %s is %q, its canonical action's %q", field, row, canonical))
		}
	}
	differs("rail account", acct, a.RailAccount)
	differs("action", it.Action, a.Action)
	differs("subject", it.Subject, a.Subject)
	differs("currency", it.Currency, a.Currency)
	differs("distinct reason", it.Distinct, a.Distinct)
	if a.Extra["amount"] != "full" && it.AmountMinor != a.AmountMinor {
		why = append(why, fmt.Sprintf("its amount is %d, its canonical action's %d", it.AmountMinor, a.AmountMinor))
	}
	payee := a.Subject
	if a.Action == string(sik.KindRefund) {
		payee = ""
	}
	differs("payee", it.Payee, payee)
	return why
}

// legalBirth reports whether r is one of the two records an intent's
// birth writes (migrations 00011 and 00020; the intent guard allows no
// other insert): from no state to PROPOSED by PROPOSED, or to IN_FLIGHT
// by ATTEMPT_STARTED on attempt 1.
func legalBirth(r AuditRecord) bool {
	switch {
	case r.ToState == string(intent.Proposed) && r.Event == string(intent.Proposed): // the birth's event is named after its state
		return r.AttemptSeq == 0
	case r.ToState == string(intent.InFlight) && r.Event == string(intent.AttemptStarted):
		return r.AttemptSeq == 1
	}
	return false
}

// legalEdge reports whether r is a transition of the state machine (the
// intent guard refuses every other change of state).
func legalEdge(r AuditRecord) bool {
	to, err := intent.Transition(intent.State(r.FromState), intent.Event(r.Event))
	return err == nil && string(to) == r.ToState
}

func leafOf(r AuditRecord) int64 {
	if r.LeafIndex == nil {
		return -1
	}
	return *r.LeafIndex
}

// rebuildTree computes every stored hash of the tree over leaves, in memory.
func rebuildTree(leaves []tlog.Hash) (tlog.HashReader, error) {
	var all []tlog.Hash
	r := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for j, i := range idx {
			out[j] = all[i]
		}
		return out, nil
	})
	for n, h := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(int64(n), h, r)
		if err != nil {
			return nil, err
		}
		all = append(all, hs...)
	}
	return r, nil
}
