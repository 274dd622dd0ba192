package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// Records have waited for sealing longer than the bound, as the
	// sequencer's signed heartbeats and the verifier's clock tell.
	AuditStaleUnsealed AuditProblemKind = "stale-unsealed"
	// A checkpoint the caller kept is not of a prefix of the log: the
	// log was rewritten (re-sealed from another history) or truncated.
	AuditForked AuditProblemKind = "forked"
	// An intent's row is not the action its SIK was derived from: its
	// SIK, amount, currency, subject, payee or reason was changed.
	AuditActionMismatch AuditProblemKind = "action-mismatch"
	// An intent's agent is not the one its birth record names: the
	// intent was moved to another agent (and so, maybe, another owner).
	AuditAgentMismatch AuditProblemKind = "agent-mismatch"
	// An intent's reason is not the one its last record holds.
	AuditReasonMismatch AuditProblemKind = "reason-mismatch"
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
	// checkpoint must verify with one of them. With none, no signature is
	// checked (the report says so in SignaturesChecked), no heartbeat
	// counts, and a report that read any checkpoint is not Ok.
	Verifiers []note.Verifier
	// MaxUnsealedAge reports records unsealed for longer; 0 reports none.
	// How long a record waited is judged by the sequencer's heartbeats
	// (signed by a trusted key: with no Verifiers none counts, so every
	// unsealed record is reported) and Now, never
	// by the record's at_micros or the database's clock, which whoever
	// writes the ledger can set: records are stale when the newest valid
	// heartbeat is older than the bound, or when a heartbeat older than
	// the bound says they were sealed. It must be longer than
	// HeartbeatIdle plus the seal interval.
	MaxUnsealedAge time.Duration
	// Now is the verifier's clock (zero: this process's time.Now()).
	Now time.Time
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
	// Accounts counts the accounts verified that the ledger holds
	// anything of, or a kept checkpoint names (a named account holding
	// nothing is verified, finds nothing, and is not counted).
	Accounts          int
	Sealed            int64 // sealed records checked
	Unsealed          int64 // records not sealed yet (their path is still checked)
	TreeSize          int64 // the latest checkpoint's size (of the one account, or summed)
	Checkpoints       int
	SignaturesChecked bool
	// KeptChecked counts the kept checkpoints checked against their log
	// (those of accounts outside RailAccount are not).
	KeptChecked int
	// OldestUnsealedMicros is when the oldest unsealed record says it was
	// written (0 if none): informational, the ledger's writer can set it.
	OldestUnsealedMicros int64
	// NewestHeartbeatMicros is the sequencer's clock in the newest valid
	// heartbeat (0 if none, or if MaxUnsealedAge is 0: none was read).
	NewestHeartbeatMicros int64
	// HeartbeatsIgnored counts the heartbeats read that were not valid
	// (unsigned by a trusted key, unreadable, or misdescribed by their
	// row): forged or altered, they count for nothing. With no trusted
	// key none is read: none could be valid.
	HeartbeatsIgnored int
	// AgentsUnchecked counts intents whose birth record names no agent
	// (written before migration 00037): nothing covers who made them.
	AgentsUnchecked int64
	Problems        []AuditProblem
}

// Ok says nothing is wrong, and nothing was taken on a signature that was
// not checked: a verification with no trusted key that read any
// checkpoint is never Ok, problems or not (whoever writes the ledger can
// re-seal it with a key of their own under the same name). One that read
// no checkpoint rests on no signature (without a key no heartbeat counts
// either), so it may be.
func (r AuditReport) Ok() bool {
	return len(r.Problems) == 0 && (r.SignaturesChecked || r.Checkpoints == 0)
}

// ErrAuditVerifyBusy means an audit verification is already running in
// this process. VerifyAudit runs one at a time per Store: a verification
// reads a whole log, and callers stacking them on one process (an owner's
// burst of VerifyAudit calls) would hold that many reads at once.
var ErrAuditVerifyBusy = errors.New("ledger: an audit verification is already running in this process; try again when it has finished")

// verifyBatch is the most rows of each of its streams a verification
// holds at once.
const verifyBatch = 500

// VerifyAudit verifies the audit logs opts names, reading one consistent
// snapshot: every sealed record against its leaf, the tree against every
// checkpoint, every checkpoint's signature and its consistency with the
// previous one, that leaf indexes run 0..size-1 with nothing sealed past
// the latest checkpoint, that each intent's records form a path of its
// states from its birth to where the intent is, and how long records stay
// unsealed. It streams each log (records in leaf order, the tree as the
// hashes of its complete subtrees, O(log n)), so its memory does not grow
// with the log, only with what it finds wrong. One runs at a time per
// Store: another call meanwhile is ErrAuditVerifyBusy, at once.
func (s *Store) VerifyAudit(ctx context.Context, opts AuditVerifyOptions) (AuditReport, error) {
	release, ok := s.sealMemory().startVerify()
	if !ok {
		return AuditReport{}, ErrAuditVerifyBusy
	}
	defer release()
	rep := AuditReport{SignaturesChecked: len(opts.Verifiers) > 0}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		accounts, err := auditAccounts(ctx, tx, opts)
		if err != nil {
			return err
		}
		var hb heartbeats
		if opts.MaxUnsealedAge > 0 {
			now := opts.Now
			if now.IsZero() {
				now = time.Now()
			}
			if hb, err = readHeartbeats(ctx, tx, opts.Verifiers, now.Add(-opts.MaxUnsealedAge).UnixMicro()); err != nil {
				return err
			}
			rep.NewestHeartbeatMicros, rep.HeartbeatsIgnored = hb.newest.AtMicros, hb.ignored
		}
		for _, acct := range accounts {
			v := &accountVerify{tx: tx, acct: acct, origin: audit.Origin(acct), opts: opts, hb: hb, rep: rep}
			if err := v.run(ctx); err != nil {
				return err
			}
			rep = v.rep
			if v.held {
				rep.Accounts++
			}
		}
		return nil
	})
	return rep, classify(err)
}

// auditAccounts lists the rail accounts to verify: the one opts names,
// whether or not the ledger holds anything of it, else every account with
// an intent, an audit record, a checkpoint or a log head (an account whose
// log was removed whole still has its intents); and the account of each
// kept checkpoint within that.
func auditAccounts(ctx context.Context, tx pgx.Tx, opts AuditVerifyOptions) ([]string, error) {
	accounts := []string{opts.RailAccount}
	if opts.RailAccount == "" {
		rows, err := tx.Query(ctx, `SELECT rail_account FROM intents UNION SELECT rail_account FROM audit_records
			UNION SELECT rail_account FROM audit_checkpoints UNION SELECT rail_account FROM audit_logs`)
		if err != nil {
			return nil, err
		}
		if accounts, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, err
		}
	}
	for _, k := range opts.Kept {
		if acct, ok := audit.RailAccountOf(k.Origin); ok && (opts.RailAccount == "" || acct == opts.RailAccount) && !slices.Contains(accounts, acct) {
			accounts = append(accounts, acct)
		}
	}
	slices.Sort(accounts)
	return accounts, nil
}

// accountVerify is the verification of one rail account's log.
type accountVerify struct {
	tx     pgx.Tx
	acct   string
	origin string
	opts   AuditVerifyOptions
	hb     heartbeats
	rep    AuditReport

	latest  audit.Checkpoint // the latest readable checkpoint
	logSize int64            // the log head's size
	held    bool             // the ledger holds anything of the account, or a kept checkpoint names it
}

func (v *accountVerify) problem(kind AuditProblemKind, recordID, leaf, size int64, sik, format string, args ...any) {
	v.rep.Problems = append(v.rep.Problems, AuditProblem{RailAccount: v.acct, Kind: kind, RecordID: recordID, LeafIndex: leaf,
		TreeSize: size, SIK: sik, Problem: fmt.Sprintf(format, args...)})
}

func (v *accountVerify) run(ctx context.Context) error {
	if err := v.tx.QueryRow(ctx, `SELECT COALESCE((SELECT tree_size FROM audit_logs WHERE rail_account = $1), 0)`, v.acct).Scan(&v.logSize); err != nil {
		return err
	}
	if v.logSize > 0 {
		v.saw()
	}
	if err := v.checkpoints(ctx); err != nil {
		return err
	}
	v.rep.TreeSize += v.latest.Size
	if v.logSize > v.latest.Size {
		v.problem(AuditMissing, -1, -1, v.logSize, "", "the log's head says %d leaves, the latest checkpoint has %d (checkpoints were removed)", v.logSize, v.latest.Size)
	}
	rebuilt, err := v.leaves(ctx)
	if err != nil {
		return err
	}
	if v.latest.Size > 0 {
		if root, err := tlog.TreeHash(v.latest.Size, v.storedHashes(ctx)); err != nil || root != v.latest.Root {
			v.problem(AuditStoredHashes, -1, -1, v.latest.Size, "", "the stored tree hashes do not give the root of the checkpoint of size %d (%v)", v.latest.Size, err)
		}
	}
	v.kept(ctx, rebuilt)
	return v.paths(ctx)
}

// saw notes that the ledger holds something of the account.
func (v *accountVerify) saw() { v.held = true }

// checkpoints checks each checkpoint's signature, shape and row, and its
// consistency with the previous readable one in the stored tree, and sets
// latest to the latest readable one.
func (v *accountVerify) checkpoints(ctx context.Context) error {
	cur, err := openCursor(ctx, v.tx, "audit_verify_checkpoints", scanCheckpoint,
		`SELECT rail_account, tree_size, note FROM audit_checkpoints WHERE rail_account = $1 ORDER BY tree_size`, v.acct)
	if err != nil {
		return err
	}
	var prev audit.Checkpoint
	for {
		c, ok, err := cur.next(ctx)
		if err != nil || !ok {
			return errors.Join(err, cur.close(ctx))
		}
		v.rep.Checkpoints++
		v.saw()
		err = nil
		if len(v.opts.Verifiers) > 0 {
			_, err = audit.OpenCheckpoint(c.Note, v.opts.Verifiers...)
		}
		switch {
		case errors.Is(err, audit.ErrBadSignature):
			v.problem(AuditBadSignature, -1, -1, c.TreeSize, "", "checkpoint of size %d: %v (altered or forged)", c.TreeSize, err)
		case errors.Is(err, audit.ErrUntrustedSigner):
			v.problem(AuditUntrustedSigner, -1, -1, c.TreeSize, "", "checkpoint of size %d: %v", c.TreeSize, err)
		}
		cp, ok := v.readable(c)
		if !ok {
			continue
		}
		if prev.Size > 0 {
			proof, err := tlog.ProveTree(cp.Size, prev.Size, v.storedHashes(ctx))
			if err == nil {
				err = audit.CheckConsistency(prev, cp, proof)
			}
			if err != nil {
				v.problem(AuditInconsistent, -1, -1, cp.Size, "", "checkpoint of size %d is not consistent with checkpoint of size %d: %v", cp.Size, prev.Size, err)
			}
		}
		prev, v.latest = cp, cp
	}
}

// readable reads c without checking its signature and says whether it is
// what its row says it is (reporting it when not, on the first pass).
func (v *accountVerify) readable(c AuditCheckpoint) (audit.Checkpoint, bool) {
	cp, err := audit.ReadCheckpoint(c.Note)
	if err != nil {
		v.problem(AuditMalformedCheckpoint, -1, -1, c.TreeSize, "", "checkpoint of size %d: %v", c.TreeSize, err)
		return cp, false
	}
	if cp.Size != c.TreeSize || cp.Origin != v.origin {
		v.problem(AuditMalformedCheckpoint, -1, -1, c.TreeSize, "", "checkpoint stored as size %d of %q says size %d of %q",
			c.TreeSize, v.origin, cp.Size, cp.Origin)
		return cp, false
	}
	return cp, true
}

// leaves streams the sealed records in leaf order: each must hash to the
// leaf sealed at its index, and indexes must run 0..size-1. While they do,
// it rebuilds the tree (its complete subtrees only) and compares its root
// with each checkpoint's; it returns the rebuilt roots at the latest
// checkpoint's size and at each kept checkpoint's, or nil if the records
// do not make the whole tree.
func (v *accountVerify) leaves(ctx context.Context) (map[int64]tlog.Hash, error) {
	recs, err := openCursor(ctx, v.tx, "audit_verify_leaves", scanAuditRecord, `SELECT `+auditRecordColumns+` FROM audit_records r
		WHERE r.rail_account = $1 AND r.leaf_index IS NOT NULL ORDER BY r.leaf_index`, v.acct)
	if err != nil {
		return nil, err
	}
	hashes, err := openCursor(ctx, v.tx, "audit_verify_hashes", scanStoredHash,
		`SELECT idx, hash FROM audit_hashes WHERE rail_account = $1 ORDER BY idx`, v.acct)
	if err != nil {
		return nil, err
	}
	cps, err := openCursor(ctx, v.tx, "audit_verify_roots", scanCheckpoint,
		`SELECT rail_account, tree_size, note FROM audit_checkpoints WHERE rail_account = $1 ORDER BY tree_size`, v.acct)
	if err != nil {
		return nil, err
	}
	roots := map[int64]tlog.Hash{} // rebuilt roots wanted: at the latest size and each kept size
	if v.latest.Size > 0 {
		roots[v.latest.Size] = tlog.Hash{}
	}
	for _, k := range v.opts.Kept {
		if k.Origin == v.origin && k.Size > 0 && k.Size <= v.latest.Size {
			roots[k.Size] = tlog.Hash{}
		}
	}
	var (
		tree       frontier
		mismatches []AuditProblem // root mismatches, reported if the records make the whole tree
		moved      movedLeaves
		next       int64
		complete   = true
		stored     storedHash
		haveStored bool
	)
	for {
		r, ok, err := recs.next(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		v.rep.Sealed++
		i := *r.LeafIndex
		if i > next && next < v.latest.Size {
			v.problem(AuditMissing, -1, next, v.latest.Size, "", "leaves %d to %d hold no record (sealed records were deleted)", next, min(i, v.latest.Size)-1)
			complete = false
		}
		next = i + 1
		if i >= v.latest.Size {
			v.problem(AuditBeyondCheckpoint, r.ID, i, v.latest.Size, r.SIK, "record %d has leaf index %d, outside the latest checkpoint (size %d)", r.ID, i, v.latest.Size)
			continue
		}
		h := r.Leaf().LeafHash()
		want := tlog.StoredHashIndex(0, i)
		for !haveStored || stored.idx < want {
			if stored, haveStored, err = hashes.next(ctx); err != nil {
				return nil, err
			}
			if !haveStored {
				break
			}
		}
		if haveStored && stored.idx == want && stored.hash != h {
			v.problem(AuditAltered, r.ID, i, v.latest.Size, r.SIK, "record %d (leaf %d): its fields do not hash to the sealed leaf (the record was altered)", r.ID, i)
			if err := moved.add(ctx, v, len(v.rep.Problems)-1, h); err != nil {
				return nil, err
			}
		}
		if !complete {
			continue
		}
		tree.add(h)
		if _, ok := roots[tree.size]; ok {
			roots[tree.size] = tree.root()
		}
		if err := v.compareRoots(ctx, cps, &tree, &mismatches); err != nil {
			return nil, err
		}
	}
	if err := moved.resolve(ctx, v); err != nil {
		return nil, err
	}
	if next < v.latest.Size {
		v.problem(AuditMissing, -1, next, v.latest.Size, "", "leaves %d to %d hold no record (sealed records were deleted)", next, v.latest.Size-1)
		complete = false
	}
	if err := errors.Join(recs.close(ctx), hashes.close(ctx), cps.close(ctx)); err != nil {
		return nil, err
	}
	if !complete || v.latest.Size == 0 {
		return nil, nil
	}
	v.rep.Problems = append(v.rep.Problems, mismatches...)
	return roots, nil
}

// compareRoots compares the rebuilt tree's root with the root of each
// readable checkpoint of its size, reading checkpoints up to it.
func (v *accountVerify) compareRoots(ctx context.Context, cps *rowCursor[AuditCheckpoint], tree *frontier, mismatches *[]AuditProblem) error {
	for {
		c, ok, err := cps.peek(ctx)
		if err != nil || !ok || c.TreeSize > tree.size {
			return err
		}
		if _, _, err := cps.next(ctx); err != nil {
			return err
		}
		cp, err := audit.ReadCheckpoint(c.Note)
		if err != nil || cp.Size != c.TreeSize || cp.Origin != v.origin || cp.Size != tree.size {
			continue // reported by checkpoints
		}
		if root := tree.root(); root != cp.Root {
			*mismatches = append(*mismatches, AuditProblem{RailAccount: v.acct, Kind: AuditRootMismatch, RecordID: -1, LeafIndex: -1, TreeSize: cp.Size,
				Problem: fmt.Sprintf("the tree rebuilt from the first %d records has root %s, the checkpoint of size %d says %s", cp.Size, root, cp.Size, cp.Root)})
		}
	}
}

// kept checks that the log extends each kept checkpoint of the account:
// in the tree rebuilt from the records when they make the whole tree (its
// roots at the kept size and at the latest are the kept and the latest
// checkpoint's), else by a consistency proof from the stored tree.
func (v *accountVerify) kept(ctx context.Context, rebuilt map[int64]tlog.Hash) {
	for _, k := range v.opts.Kept {
		if k.Origin != v.origin {
			continue
		}
		v.rep.KeptChecked++
		v.saw()
		var err error
		switch {
		case rebuilt == nil || k.Size == 0 || k.Size > v.latest.Size || (k.Size == v.latest.Size && k.Root != v.latest.Root):
			err = extendsKept(k, v.latest, v.storedHashes(ctx))
		case rebuilt[k.Size] != k.Root:
			err = fmt.Errorf("the log at size %d does not extend it (the tree rebuilt from its records has root %s at size %d)", v.latest.Size, rebuilt[k.Size], k.Size)
		case rebuilt[v.latest.Size] != v.latest.Root:
			err = fmt.Errorf("the log at size %d does not extend it (the tree rebuilt from its records is not the latest checkpoint's)", v.latest.Size)
		}
		if err != nil {
			v.problem(AuditForked, -1, -1, k.Size, "", "the kept checkpoint of size %d (root %s): %v: the log was rewritten or truncated since", k.Size, k.Root, err)
		}
	}
}

// paths streams each intent with its records, sealed ones in leaf order
// then unsealed ones in id order: they must be a path from its birth to
// where the intent stands, and (CheckActions) the intent the action its
// SIK was derived from. It counts unsealed records and how long they wait.
func (v *accountVerify) paths(ctx context.Context) error {
	// Both streams in byte order of the SIK, the order Go compares in.
	recs, err := openCursor(ctx, v.tx, "audit_verify_paths", scanAuditRecord, `SELECT `+auditRecordColumns+` FROM audit_records r
		WHERE r.rail_account = $1 ORDER BY r.sik COLLATE "C", r.leaf_index NULLS LAST, r.id`, v.acct)
	if err != nil {
		return err
	}
	intents, err := openCursor(ctx, v.tx, "audit_verify_intents", pgx.RowToStructByPos[intentRow],
		`SELECT sik, state, action, subject, amount_minor, currency, payee, distinct_reason, canonical, COALESCE(agent_id, ''), reason
		FROM intents WHERE rail_account = $1 ORDER BY sik COLLATE "C"`, v.acct)
	if err != nil {
		return err
	}
	var unsealed unsealedRecords
	for {
		r, rok, err := recs.peek(ctx)
		if err != nil {
			return err
		}
		it, iok, err := intents.peek(ctx)
		if err != nil {
			return err
		}
		if !rok && !iok {
			break
		}
		v.saw()
		var sk string
		switch {
		case !rok || (iok && it.SIK <= r.SIK):
			sk = it.SIK
		default:
			sk = r.SIK
		}
		var last, birth AuditRecord
		seen := false
		for rok && r.SIK == sk {
			if _, _, err := recs.next(ctx); err != nil {
				return err
			}
			v.step(r, last, seen)
			if !seen {
				birth = r
			}
			unsealed.count(r, v)
			last, seen = r, true
			if r, rok, err = recs.peek(ctx); err != nil {
				return err
			}
		}
		if !iok || it.SIK != sk {
			v.problem(AuditPathBroken, last.ID, leafOf(last), 0, sk, "intent %s has audit records (the last, %d, ends at %s) but no intent row (the intent was deleted)", sk, last.ID, last.ToState)
			continue
		}
		if _, _, err := intents.next(ctx); err != nil {
			return err
		}
		switch {
		case !seen:
			v.problem(AuditPathBroken, -1, -1, 0, sk, "intent %s is %s but has no audit record", sk, it.State)
		case last.ToState != it.State:
			v.problem(AuditPathBroken, last.ID, leafOf(last), 0, sk, "intent %s is %s, but its last record (%d) ends at %s (later records are missing)", sk, it.State, last.ID, last.ToState)
		}
		if seen {
			v.covered(it, birth, last)
		}
		if v.opts.CheckActions {
			for _, why := range checkIntentAction(v.acct, it) {
				v.problem(AuditActionMismatch, -1, -1, 0, it.SIK, "intent %s: %s (the intent was edited after it was keyed)", it.SIK, why)
			}
		}
	}
	unsealed.report(v)
	return errors.Join(recs.close(ctx), intents.close(ctx))
}

// birthAgentPrefix opens the detail of a birth record that names the
// intent's agent (migration 00037): "agent: <id>", then on a line of its
// own what the detail held before.
const birthAgentPrefix = "agent: "

// birthAgent reads the agent a birth record's detail names, and the rest
// of the detail; ok is false when it names none (written before 00037).
func birthAgent(detail string) (agent, rest string, ok bool) {
	after, ok := strings.CutPrefix(detail, birthAgentPrefix)
	if !ok {
		return "", detail, false
	}
	agent, rest, _ = strings.Cut(after, "\n")
	return agent, rest, true
}

// covered checks the intent's columns its records cover beyond its state:
// its agent is the one its birth record names, and its reason is the
// detail of its last record (a transition writes the intent's reason as
// its record's detail; a birth writes it unless the intent has a
// distinct reason, which the detail holds instead).
func (v *accountVerify) covered(it intentRow, birth, last AuditRecord) {
	agent, rest, named := birthAgent(birth.Detail)
	switch {
	case birth.FromState != "":
		// No birth record: reported as a broken path.
	case !named:
		v.rep.AgentsUnchecked++
	case agent != it.AgentID:
		v.problem(AuditAgentMismatch, birth.ID, leafOf(birth), 0, it.SIK, "intent %s: its agent is %q, but its birth record (%d) names %q (the intent was moved to another agent)",
			it.SIK, it.AgentID, birth.ID, agent)
	}
	want, checked := last.Detail, last.FromState != ""
	if last.ID == birth.ID && it.Distinct == "" {
		want, checked = rest, true
	}
	if checked && it.Reason != want {
		v.problem(AuditReasonMismatch, last.ID, leafOf(last), 0, it.SIK, "intent %s: its reason is not its last record's (%d) (the intent was edited after the record)", it.SIK, last.ID)
	}
}

// step checks that r, the record of an intent after prev (seen: there is
// one), is its birth or a transition from where prev left it.
func (v *accountVerify) step(r, prev AuditRecord, seen bool) {
	switch {
	case !seen && r.FromState != "":
		v.problem(AuditPathBroken, r.ID, leafOf(r), 0, r.SIK, "intent %s: its first record (%d) starts from %s, not from its birth (earlier records are missing)", r.SIK, r.ID, r.FromState)
	case !seen && !legalBirth(r):
		v.problem(AuditIllegalTransition, r.ID, leafOf(r), 0, r.SIK, "intent %s: its birth record (%d) is '' → %s by %s (attempt %d); an intent is born PROPOSED, or IN_FLIGHT by its first attempt's start",
			r.SIK, r.ID, r.ToState, r.Event, r.AttemptSeq)
	case seen && r.FromState != prev.ToState:
		v.problem(AuditPathBroken, r.ID, leafOf(r), 0, r.SIK, "intent %s: record %d goes from %s, but the record before it (%d) ends at %s (a record between them is missing or out of order)",
			r.SIK, r.ID, r.FromState, prev.ID, prev.ToState)
	case seen && !legalEdge(r):
		v.problem(AuditIllegalTransition, r.ID, leafOf(r), 0, r.SIK, "intent %s: record %d moves %s → %s by %s, which the intent state machine does not allow",
			r.SIK, r.ID, r.FromState, r.ToState, r.Event)
	}
}

// heartbeats is what verification takes from the sequencer's heartbeats:
// the newest valid one, and the highest record id a valid heartbeat older
// than the bound says was sealed.
type heartbeats struct {
	newest  AuditHeartbeat // AtMicros 0: no valid heartbeat
	covered int64          // records up to this id were sealed before the bound
	cutoff  int64          // now minus the bound, Unix microseconds
	ignored int
}

// readHeartbeats reads the heartbeats from the newest down to the first
// valid one at or before cutoff: a heartbeat is valid when its note
// verifies with a trusted key and its row says what its note does. With
// no trusted key none is valid (anyone can sign one), so none is read.
// Rows are ordered by their signed_micros; one that lies about it is not
// valid, so the first valid row found is the newest.
func readHeartbeats(ctx context.Context, tx pgx.Tx, trusted []note.Verifier, cutoff int64) (heartbeats, error) {
	hb := heartbeats{cutoff: cutoff}
	if len(trusted) == 0 {
		return hb, nil
	}
	type row struct {
		maxID, at int64
		note      string
	}
	cur, err := openCursor(ctx, tx, "audit_verify_heartbeats", func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.maxID, &x.at, &x.note)
		return x, err
	}, `SELECT max_record_id, signed_micros, note FROM audit_heartbeats ORDER BY signed_micros DESC, id DESC`)
	if err != nil {
		return hb, err
	}
	for {
		x, ok, err := cur.next(ctx)
		if err != nil || !ok {
			return hb, errors.Join(err, cur.close(ctx))
		}
		h, err := openHeartbeat(x.note, trusted...)
		if err != nil || h.MaxRecordID != x.maxID || h.AtMicros != x.at {
			hb.ignored++
			continue
		}
		if hb.newest.AtMicros == 0 {
			hb.newest = h
		}
		if h.AtMicros <= cutoff {
			hb.covered = h.MaxRecordID
			return hb, cur.close(ctx)
		}
	}
}

// stale says whether the unsealed record r has waited longer than the
// bound: no valid heartbeat is newer than the bound (no sequencer has
// sealed what waited since), or one older than the bound covers r.
func (h heartbeats) stale(r AuditRecord) bool {
	return h.newest.AtMicros <= h.cutoff || r.ID <= h.covered
}

// unsealedRecords counts an account's unsealed records, those waiting
// longer than the bound, and the oldest (by id: at_micros is the
// writer's to set).
type unsealedRecords struct {
	n, stale int64
	oldest   AuditRecord
	earliest int64 // the lowest at_micros, informational
}

func (u *unsealedRecords) count(r AuditRecord, v *accountVerify) {
	if r.LeafIndex != nil {
		return
	}
	u.n++
	if u.oldest.ID == 0 || r.ID < u.oldest.ID {
		u.oldest = r
	}
	if u.earliest == 0 || r.AtMicros < u.earliest {
		u.earliest = r.AtMicros
	}
	if v.opts.MaxUnsealedAge > 0 && v.hb.stale(r) {
		u.stale++
	}
}

func (u *unsealedRecords) report(v *accountVerify) {
	v.rep.Unsealed += u.n
	if u.earliest != 0 && (v.rep.OldestUnsealedMicros == 0 || u.earliest < v.rep.OldestUnsealedMicros) {
		v.rep.OldestUnsealedMicros = u.earliest
	}
	if u.stale == 0 {
		return
	}
	if len(v.opts.Verifiers) == 0 {
		v.problem(AuditStaleUnsealed, u.oldest.ID, -1, 0, u.oldest.SIK, "%d records unsealed for longer than %s, as far as this verification can tell (the oldest is record %d): no trusted verifier key was given, so no sequencer heartbeat vouches that they were sealed in time",
			u.stale, v.opts.MaxUnsealedAge, u.oldest.ID)
		return
	}
	since := "no valid sequencer heartbeat at all"
	if v.hb.newest.AtMicros != 0 {
		since = "the newest valid sequencer heartbeat is from " + time.UnixMicro(v.hb.newest.AtMicros).UTC().Format(time.RFC3339)
	}
	v.problem(AuditStaleUnsealed, u.oldest.ID, -1, 0, u.oldest.SIK, "%d records unsealed for longer than %s (the oldest is record %d; %s, verifier's clock %s): is a sequencer running with a signing key?",
		u.stale, v.opts.MaxUnsealedAge, u.oldest.ID, since, time.UnixMicro(v.hb.cutoff).Add(v.opts.MaxUnsealedAge).UTC().Format(time.RFC3339))
}

// movedLeaves tells a moved record from an altered one: a record whose
// leaf hash is sealed at another of the log's leaf indexes was moved. The
// records found altered are looked up verifyBatch at a time.
type movedLeaves struct {
	problems []int // indexes in the report's problems, reported altered
	hashes   [][]byte
}

func (m *movedLeaves) add(ctx context.Context, v *accountVerify, problem int, h tlog.Hash) error {
	m.problems, m.hashes = append(m.problems, problem), append(m.hashes, h[:])
	if len(m.problems) < verifyBatch {
		return nil
	}
	return m.resolve(ctx, v)
}

func (m *movedLeaves) resolve(ctx context.Context, v *accountVerify) error {
	if len(m.problems) == 0 {
		return nil
	}
	rows, err := v.tx.Query(ctx, `SELECT idx, hash FROM audit_hashes WHERE rail_account = $1 AND hash = ANY($2::bytea[])`, v.acct, m.hashes)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, scanStoredHash)
	if err != nil {
		return err
	}
	sealedAt := map[tlog.Hash]int64{}
	for _, f := range found {
		if level, n := tlog.SplitStoredHashIndex(f.idx); level == 0 && n < max(v.latest.Size, v.logSize) {
			sealedAt[f.hash] = n
		}
	}
	for j, pi := range m.problems {
		var h tlog.Hash
		copy(h[:], m.hashes[j])
		if at, moved := sealedAt[h]; moved {
			p := &v.rep.Problems[pi]
			p.Kind = AuditReordered
			p.Problem = fmt.Sprintf("record %d is at leaf %d, but it was sealed as leaf %d (records were reordered)", p.RecordID, p.LeafIndex, at)
		}
	}
	m.problems, m.hashes = m.problems[:0], m.hashes[:0]
	return nil
}

// storedHashes reads the account's stored tree hashes from the ledger.
func (v *accountVerify) storedHashes(ctx context.Context) tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		rows, err := v.tx.Query(ctx, `SELECT idx, hash FROM audit_hashes WHERE rail_account = $1 AND idx = ANY($2)`, v.acct, idx)
		if err != nil {
			return nil, err
		}
		found, err := pgx.CollectRows(rows, scanStoredHash)
		if err != nil {
			return nil, err
		}
		got := make(map[int64]tlog.Hash, len(found))
		for _, f := range found {
			got[f.idx] = f.hash
		}
		out := make([]tlog.Hash, len(idx))
		for j, i := range idx {
			h, ok := got[i]
			if !ok {
				return nil, fmt.Errorf("stored hash %d is missing", i)
			}
			out[j] = h
		}
		return out, nil
	})
}

// frontier is a tree being rebuilt leaf by leaf, as the roots of its
// maximal complete subtrees, left to right (at most log2(size)+1 of them).
type frontier struct {
	size    int64
	hashes  []tlog.Hash
	heights []int
}

func (f *frontier) add(h tlog.Hash) {
	f.size++
	f.hashes, f.heights = append(f.hashes, h), append(f.heights, 0)
	for n := len(f.hashes); n >= 2 && f.heights[n-1] == f.heights[n-2]; n = len(f.hashes) {
		f.hashes[n-2] = tlog.NodeHash(f.hashes[n-2], f.hashes[n-1])
		f.heights[n-2]++
		f.hashes, f.heights = f.hashes[:n-1], f.heights[:n-1]
	}
}

// root is the RFC 6962 root of the tree so far (at least one leaf): its
// subtrees folded from the right.
func (f *frontier) root() tlog.Hash {
	r := f.hashes[len(f.hashes)-1]
	for i := len(f.hashes) - 2; i >= 0; i-- {
		r = tlog.NodeHash(f.hashes[i], r)
	}
	return r
}

// rowCursor streams one query's rows through a server-side cursor of the
// verification's transaction, verifyBatch rows at a time: several streams
// are read side by side on the one connection, and memory holds one batch
// of each however long the log.
type rowCursor[T any] struct {
	tx   pgx.Tx
	name string
	scan pgx.RowToFunc[T]
	buf  []T
	done bool
}

func openCursor[T any](ctx context.Context, tx pgx.Tx, name string, scan pgx.RowToFunc[T], query string, args ...any) (*rowCursor[T], error) {
	if _, err := tx.Exec(ctx, `DECLARE `+name+` NO SCROLL CURSOR FOR `+query, args...); err != nil {
		return nil, err
	}
	return &rowCursor[T]{tx: tx, name: name, scan: scan}, nil
}

// peek returns the next row without taking it (ok false at the end).
func (c *rowCursor[T]) peek(ctx context.Context) (T, bool, error) {
	var zero T
	if len(c.buf) == 0 && !c.done {
		rows, err := c.tx.Query(ctx, `FETCH `+strconv.Itoa(verifyBatch)+` FROM `+c.name)
		if err != nil {
			return zero, false, err
		}
		if c.buf, err = pgx.CollectRows(rows, c.scan); err != nil {
			return zero, false, err
		}
		c.done = len(c.buf) < verifyBatch
	}
	if len(c.buf) == 0 {
		return zero, false, nil
	}
	return c.buf[0], true, nil
}

// next takes the next row (ok false at the end).
func (c *rowCursor[T]) next(ctx context.Context) (T, bool, error) {
	v, ok, err := c.peek(ctx)
	if ok {
		var zero T
		c.buf[0] = zero
		c.buf = c.buf[1:]
	}
	return v, ok, err
}

func (c *rowCursor[T]) close(ctx context.Context) error {
	_, err := c.tx.Exec(ctx, `CLOSE `+c.name)
	return err
}

// storedHash is one stored hash of a tree.
type storedHash struct {
	idx  int64
	hash tlog.Hash
}

func scanStoredHash(r pgx.CollectableRow) (storedHash, error) {
	var h storedHash
	var b []byte
	err := r.Scan(&h.idx, &b)
	copy(h.hash[:], b)
	return h, err
}

func scanCheckpoint(r pgx.CollectableRow) (AuditCheckpoint, error) {
	var c AuditCheckpoint
	err := r.Scan(&c.RailAccount, &c.TreeSize, &c.Note)
	return c, err
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
	AgentID, Reason             string
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
