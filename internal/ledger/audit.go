package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/countersign/countersign/internal/audit"
)

// AuditRecord is one audited transition (I6), as the trigger wrote it in
// the deciding transaction. LeafIndex is nil until the sequencer seals it
// into its rail account's log.
type AuditRecord struct {
	ID          int64
	RailAccount string
	SIK         string
	FromState   string
	ToState     string
	Event       string
	AttemptSeq  int
	Detail      string
	AtMicros    int64
	LeafIndex   *int64
}

// Leaf is the record as its log leaf covers it.
func (r AuditRecord) Leaf() audit.Record {
	return audit.Record{ID: r.ID, RailAccount: r.RailAccount, SIK: r.SIK, FromState: r.FromState, ToState: r.ToState,
		Event: r.Event, AttemptSeq: r.AttemptSeq, Detail: r.Detail, AtMicros: r.AtMicros}
}

// auditRecordColumns are an audit record's columns, on the alias r.
const auditRecordColumns = `r.id, r.rail_account, r.sik, r.from_state, r.to_state, r.event, r.attempt_seq, r.detail,
	r.at_micros, r.leaf_index`

func scanAuditRecord(r pgx.CollectableRow) (AuditRecord, error) {
	var a AuditRecord
	err := r.Scan(&a.ID, &a.RailAccount, &a.SIK, &a.FromState, &a.ToState, &a.Event, &a.AttemptSeq,
		&a.Detail, &a.AtMicros, &a.LeafIndex)
	return a, err
}

var (
	// ErrNotSealed means an audit record is not in its log yet.
	ErrNotSealed = errors.New("ledger: the audit record is not sealed yet")
	// ErrProofRange means a proof was asked between trees that cannot
	// have one (a leaf outside the tree, an older tree larger than a newer).
	ErrProofRange = errors.New("ledger: no such proof")
	// ErrAuditRewritten means the sequencer refused to sign: the log in
	// the ledger does not extend the one sealed before (its sealed rows
	// were removed, or it is not the tree this process last signed).
	ErrAuditRewritten = errors.New("ledger: refusing to seal the audit log: it does not extend the log sealed before")
)

// SealBatch is the most records one sealing transaction takes.
const SealBatch = 1000

// beginSeal opens a sealing transaction: READ COMMITTED (so after waiting
// for the log row it sees what the previous sealing committed) and durable.
const beginSeal = "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit = on"

// SealReport says what one Seal did.
type SealReport struct {
	Accounts int   // rail accounts that had records to seal
	Records  int64 // records sealed
	Failed   int   // rail accounts whose sealing failed (the error says why)
	// Heartbeat says the pass signed and stored a heartbeat (it sealed
	// everything waiting, and one was due: see writeHeartbeat).
	Heartbeat bool
}

// Seal seals every unsealed audit record, account by account, into its
// rail account's log, signing a checkpoint with signer after each batch.
// Any number of processes may call it at once: each account's sealings
// take that account's log row lock, and nothing else. An account whose
// sealing fails does not hold up the others: Seal goes on with them and
// returns every account's failure, joined, with what it did seal.
//
// When every account sealed everything waiting (or nothing was), Seal
// signs a heartbeat (see AuditHeartbeat): at this process's clock when the
// pass began, every record up to the highest id it saw then is sealed.
func (s *Store) Seal(ctx context.Context, signer note.Signer) (SealReport, error) {
	var rep SealReport
	// Read the clock, then the highest id, before listing what waits: a
	// record the heartbeat covers was committed when the listing ran.
	began := time.Now()
	var maxID int64
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM audit_records`).Scan(&maxID); err != nil {
		return rep, classify(err)
	}
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT rail_account FROM audit_records WHERE leaf_index IS NULL ORDER BY 1`)
	if err != nil {
		return rep, classify(err)
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return rep, classify(err)
	}
	var errs []error
	for _, acct := range accounts {
		if ctx.Err() != nil {
			errs = append(errs, classify(ctx.Err()))
			break
		}
		var sealed int64
		for {
			n, err := s.SealAccount(ctx, acct, signer, SealBatch)
			if err != nil {
				rep.Failed++
				errs = append(errs, fmt.Errorf("audit log of %s: %w", acct, err))
				break
			}
			sealed += int64(n)
			if n < SealBatch {
				break
			}
		}
		if sealed > 0 {
			rep.Accounts++
			rep.Records += sealed
		}
	}
	if len(errs) == 0 && ctx.Err() == nil {
		wrote, err := s.writeHeartbeat(ctx, signer, AuditHeartbeat{MaxRecordID: maxID, AtMicros: began.UnixMicro()})
		if err != nil {
			errs = append(errs, fmt.Errorf("audit heartbeat: %w", err))
		}
		rep.Heartbeat = wrote
	}
	return rep, errors.Join(errs...)
}

// AuditHeartbeat is a sequencer's signed statement that, at AtMicros by
// its own clock, every audit record with an id up to MaxRecordID was
// sealed (or not yet committed: a deciding transaction commits its record
// after its id is drawn, and the next pass seals it). `audit verify`
// judges how long records wait by the newest heartbeat whose signature
// verifies, against the verifier's clock, not by the records' at_micros,
// which whoever writes the ledger can set.
type AuditHeartbeat struct {
	MaxRecordID int64
	AtMicros    int64
}

// heartbeatOrigin opens every heartbeat note. It is not under the origin
// prefix of a rail account's log, and a heartbeat's third line is not a
// root hash, so a heartbeat never reads as a checkpoint nor the reverse.
const heartbeatOrigin = "countersign/audit-heartbeat"

// Heartbeat pacing: a heartbeat is written when the highest record id has
// moved on since the newest one, at most every heartbeatMinGap, and else
// every HeartbeatIdle. A verification bound (--max-unsealed-age) must be
// longer than HeartbeatIdle plus the seal interval, or a running
// sequencer's records may be reported stale while they wait for a pass.
const (
	HeartbeatIdle   = 30 * time.Second
	heartbeatMinGap = time.Second
)

// body is the heartbeat's note text: its origin, then "max-record-id N"
// and "time MICROS" (Unix microseconds), one per line.
func (h AuditHeartbeat) body() string {
	return fmt.Sprintf("%s\nmax-record-id %d\ntime %d\n", heartbeatOrigin, h.MaxRecordID, h.AtMicros)
}

// parseHeartbeat reads a heartbeat note's text, exactly as body writes it.
func parseHeartbeat(text string) (AuditHeartbeat, error) {
	lines := strings.Split(text, "\n")
	if len(lines) != 4 || lines[0] != heartbeatOrigin || lines[3] != "" {
		return AuditHeartbeat{}, errors.New("not a heartbeat: want its origin, max-record-id and time lines")
	}
	num := func(line, key string) (int64, error) {
		v, ok := strings.CutPrefix(line, key+" ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil || n < 0 || strconv.FormatInt(n, 10) != v {
			return 0, fmt.Errorf("heartbeat: %q is not %s and a decimal number", line, key)
		}
		return n, nil
	}
	id, err := num(lines[1], "max-record-id")
	if err != nil {
		return AuditHeartbeat{}, err
	}
	at, err := num(lines[2], "time")
	if err != nil {
		return AuditHeartbeat{}, err
	}
	h := AuditHeartbeat{MaxRecordID: id, AtMicros: at}
	if h.body() != text {
		return AuditHeartbeat{}, errors.New("heartbeat: not in its canonical form")
	}
	return h, nil
}

// openHeartbeat verifies a signed heartbeat note with any of the trusted
// verifiers (audit.OpenNote) and parses it. No verifier is
// audit.ErrNoTrustedKey: a heartbeat anyone could have signed vouches for
// nothing.
func openHeartbeat(signed string, trusted ...note.Verifier) (AuditHeartbeat, error) {
	text, err := audit.OpenNote(signed, trusted...)
	if err != nil {
		return AuditHeartbeat{}, err
	}
	return parseHeartbeat(text)
}

// writeHeartbeat signs h and stores it, unless one is not due: the newest
// stored heartbeat (not after h, by its row) covers h's record id and is
// less than HeartbeatIdle old, or it is less than heartbeatMinGap old.
// Writers across processes take turns on the table's lock, so concurrent
// sequencers do not each add one.
func (s *Store) writeHeartbeat(ctx context.Context, signer note.Signer, h AuditHeartbeat) (bool, error) {
	signed, err := note.Sign(&note.Note{Text: h.body()}, signer)
	if err != nil {
		return false, fmt.Errorf("sign heartbeat: %w", err)
	}
	wrote := false
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: beginSeal}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE audit_heartbeats IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		// A row dated after h (a clock set back, or a row written to stop
		// heartbeats) is not trusted to make this one unnecessary.
		var lastID, lastAt int64
		err := tx.QueryRow(ctx, `SELECT max_record_id, signed_micros FROM audit_heartbeats WHERE signed_micros <= $1
			ORDER BY signed_micros DESC, id DESC LIMIT 1`, h.AtMicros).Scan(&lastID, &lastAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		default:
			age := time.Duration(h.AtMicros-lastAt) * time.Microsecond
			if age < heartbeatMinGap || (h.MaxRecordID <= lastID && age < HeartbeatIdle) {
				return nil
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_heartbeats (max_record_id, signed_micros, note) VALUES ($1, $2, $3)`,
			h.MaxRecordID, h.AtMicros, string(signed)); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, classify(err)
	}
	return wrote, nil
}

// SealAccount seals up to batch of railAccount's unsealed records, in id
// order, as the next leaves of its log, and stores the new tree hashes and
// a checkpoint signed by signer, in one transaction. It returns how many
// records it sealed (0 when none were waiting).
func (s *Store) SealAccount(ctx context.Context, railAccount string, signer note.Signer, batch int) (int, error) {
	var sealed int
	var next audit.Checkpoint
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: beginSeal}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO audit_logs (rail_account) VALUES ($1) ON CONFLICT DO NOTHING`, railAccount); err != nil {
			return err
		}
		// The one lock of a sealing: this account's log row. Decisions
		// never take it.
		var size int64
		if err := tx.QueryRow(ctx, `SELECT tree_size FROM audit_logs WHERE rail_account = $1 FOR UPDATE`, railAccount).Scan(&size); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+auditRecordColumns+` FROM audit_records r
			WHERE r.rail_account = $1 AND r.leaf_index IS NULL ORDER BY r.id LIMIT $2`, railAccount, batch)
		if err != nil {
			return err
		}
		recs, err := pgx.CollectRows(rows, scanAuditRecord)
		if err != nil || len(recs) == 0 {
			return err
		}
		if size == 0 {
			if err := checkFreshLog(ctx, tx, railAccount); err != nil {
				return err
			}
		}
		hashes := newHashCache(func(idx []int64) ([]tlog.Hash, error) { return readHashes(ctx, tx, railAccount, idx) })
		ids, leaves := make([]int64, len(recs)), make([]int64, len(recs))
		var newIdx []int64
		var newHash [][]byte
		for i, r := range recs {
			n := size + int64(i)
			hs, err := tlog.StoredHashesForRecordHash(n, r.Leaf().LeafHash(), hashes)
			if err != nil {
				return fmt.Errorf("ledger: audit tree of %s at leaf %d: %w", railAccount, n, err)
			}
			base := tlog.StoredHashCount(n)
			for j, h := range hs {
				hashes.put(base+int64(j), h)
				newIdx = append(newIdx, base+int64(j))
				newHash = append(newHash, h[:])
			}
			ids[i], leaves[i] = r.ID, n
		}
		newSize := size + int64(len(recs))
		root, err := tlog.TreeHash(newSize, hashes)
		if err != nil {
			return fmt.Errorf("ledger: audit tree of %s: %w", railAccount, err)
		}
		next = audit.Checkpoint{Origin: audit.Origin(railAccount), Size: newSize, Root: root}
		if err := s.sealMemory().check(railAccount, next, hashes); err != nil {
			return err
		}
		signed, err := audit.SignCheckpoint(next, signer)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE audit_records SET leaf_index = u.leaf
			FROM unnest($1::bigint[], $2::bigint[]) AS u(id, leaf) WHERE audit_records.id = u.id`, ids, leaves); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_hashes (rail_account, idx, hash)
			SELECT $1, i, h FROM unnest($2::bigint[], $3::bytea[]) AS u(i, h)`, railAccount, newIdx, newHash); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit_checkpoints (rail_account, tree_size, note) VALUES ($1, $2, $3)`,
			railAccount, newSize, signed); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE audit_logs SET tree_size = $2, root_hash = $3, sealed_at = now() WHERE rail_account = $1`,
			railAccount, newSize, root[:]); err != nil {
			return err
		}
		sealed = len(recs)
		return nil
	})
	if err != nil {
		return 0, classify(err)
	}
	if sealed > 0 {
		s.sealMemory().signed(railAccount, next)
	}
	return sealed, nil
}

// checkFreshLog refuses to start railAccount's log at size 0 when the
// ledger shows it was sealed before: a record with a leaf index, a stored
// tree hash or a checkpoint of the account (the log row was removed, and
// a new log from size 0 would re-sign whatever history is there now).
func checkFreshLog(ctx context.Context, tx pgx.Tx, railAccount string) error {
	var sealedBefore bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_records WHERE rail_account = $1 AND leaf_index IS NOT NULL)
		OR EXISTS (SELECT 1 FROM audit_hashes WHERE rail_account = $1)
		OR EXISTS (SELECT 1 FROM audit_checkpoints WHERE rail_account = $1)`, railAccount).Scan(&sealedBefore); err != nil {
		return err
	}
	if sealedBefore {
		return fmt.Errorf("%w: the log of %s has no head, but sealed records, tree hashes or checkpoints of it remain", ErrAuditRewritten, railAccount)
	}
	return nil
}

// sealMemory is what one Store's sealings remember in this process: per
// rail account, the largest checkpoint they signed. A sealing signs only a
// tree that provably extends it, so a log rewritten under a running
// sequencer (its rows removed and its history edited) is refused rather
// than re-signed. A restarted process remembers nothing and trusts the
// ledger: only checkpoints kept outside it (verify --trusted-checkpoint)
// catch a rewrite then.
//
// It also holds the Store's one audit verification slot (VerifyAudit runs
// one at a time): the sealMemory is the one audit state a Store and every
// handle on its pool share.
type sealMemory struct {
	mu        sync.Mutex
	last      map[string]audit.Checkpoint
	verifying chan struct{} // holds a token while a verification runs
}

// sealMemory is the Store's memory of its sealings, shared by every handle
// on the same pool (WithTxObserver copies the Store, not the memory).
func (s *Store) sealMemory() *sealMemory { return s.seals }

func newSealMemory() *sealMemory {
	return &sealMemory{last: map[string]audit.Checkpoint{}, verifying: make(chan struct{}, 1)}
}

// startVerify takes the verification slot without waiting; ok is false
// when a verification holds it. release gives it back (once).
func (m *sealMemory) startVerify() (release func(), ok bool) {
	select {
	case m.verifying <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-m.verifying }) }, true
	default:
		return nil, false
	}
}

// check says whether next, the tree over hashes about to be signed for
// railAccount, extends the last checkpoint this process signed for it.
func (m *sealMemory) check(railAccount string, next audit.Checkpoint, hashes tlog.HashReader) error {
	m.mu.Lock()
	prev, ok := m.last[railAccount]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	if prev.Size > next.Size {
		return fmt.Errorf("%w: this process signed the log of %s at size %d, the ledger's would now be %d", ErrAuditRewritten, railAccount, prev.Size, next.Size)
	}
	proof, err := tlog.ProveTree(next.Size, prev.Size, hashes)
	if err == nil {
		err = tlog.CheckTree(proof, next.Size, next.Root, prev.Size, prev.Root)
	}
	if err != nil {
		return fmt.Errorf("%w: the tree of %s at size %d does not extend the one this process signed at size %d (%w)",
			ErrAuditRewritten, railAccount, next.Size, prev.Size, err)
	}
	return nil
}

// signed remembers c, signed and committed for railAccount, unless a
// larger checkpoint (of a concurrent sealing) is remembered already.
func (m *sealMemory) signed(railAccount string, c audit.Checkpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.Size > m.last[railAccount].Size {
		m.last[railAccount] = c
	}
}

// hashCache is a tlog.HashReader over the hashes a sealing has computed,
// falling back to the stored ones.
type hashCache struct {
	known map[int64]tlog.Hash
	read  func([]int64) ([]tlog.Hash, error)
}

func newHashCache(read func([]int64) ([]tlog.Hash, error)) *hashCache {
	return &hashCache{known: map[int64]tlog.Hash{}, read: read}
}

func (c *hashCache) put(i int64, h tlog.Hash) { c.known[i] = h }

func (c *hashCache) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	var missing []int64
	for _, i := range indexes {
		if _, ok := c.known[i]; !ok {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		hs, err := c.read(missing)
		if err != nil {
			return nil, err
		}
		for j, i := range missing {
			c.known[i] = hs[j]
		}
	}
	out := make([]tlog.Hash, len(indexes))
	for j, i := range indexes {
		out[j] = c.known[i]
	}
	return out, nil
}

// rowsQuerier is what readHashes needs of a pool or a transaction.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readHashes reads stored hashes of railAccount's tree, in the order asked.
func readHashes(ctx context.Context, q rowsQuerier, railAccount string, indexes []int64) ([]tlog.Hash, error) {
	rows, err := q.Query(ctx, `SELECT idx, hash FROM audit_hashes WHERE rail_account = $1 AND idx = ANY($2)`, railAccount, indexes)
	if err != nil {
		return nil, err
	}
	got := map[int64]tlog.Hash{}
	for rows.Next() {
		var i int64
		var b []byte
		if err := rows.Scan(&i, &b); err != nil {
			rows.Close()
			return nil, err
		}
		var h tlog.Hash
		copy(h[:], b)
		got[i] = h
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]tlog.Hash, len(indexes))
	for j, i := range indexes {
		h, ok := got[i]
		if !ok {
			return nil, fmt.Errorf("ledger: stored hash %d of the audit tree of %s is missing", i, railAccount)
		}
		out[j] = h
	}
	return out, nil
}

// AuditCheckpoint is one signed checkpoint as stored.
type AuditCheckpoint struct {
	RailAccount string
	TreeSize    int64
	Note        string
}

// checkpointAt returns railAccount's checkpoint of size (0: the latest).
func checkpointAt(ctx context.Context, q rowsQuerier, railAccount string, size int64) (AuditCheckpoint, error) {
	rows, err := q.Query(ctx, `SELECT rail_account, tree_size, note FROM audit_checkpoints
		WHERE rail_account = $1 AND ($2 = 0 OR tree_size = $2) ORDER BY tree_size DESC LIMIT 1`, railAccount, size)
	if err != nil {
		return AuditCheckpoint{}, err
	}
	c, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (AuditCheckpoint, error) {
		var c AuditCheckpoint
		err := r.Scan(&c.RailAccount, &c.TreeSize, &c.Note)
		return c, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		if size == 0 {
			return AuditCheckpoint{}, fmt.Errorf("%w: rail account %s has no audit checkpoint yet", ErrNotFound, railAccount)
		}
		return AuditCheckpoint{}, fmt.Errorf("%w: rail account %s has no audit checkpoint of size %d", ErrNotFound, railAccount, size)
	}
	return c, err
}

// InclusionProof proves a sealed record is a leaf of a checkpointed tree.
type InclusionProof struct {
	Record     AuditRecord
	Checkpoint AuditCheckpoint
	Proof      tlog.RecordProof
}

// OwnerInclusionProof proves that audit record recordID, of one of
// ownerID's intents on a rail account it holds, is in the tree of the
// checkpoint of treeSize (0: the latest). Another owner's record, or one on
// an account ownerID no longer holds, is ErrNotFound.
func (s *Store) OwnerInclusionProof(ctx context.Context, ownerID string, recordID, treeSize int64) (InclusionProof, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+auditRecordColumns+`
		FROM audit_records r JOIN intents i ON i.rail_account = r.rail_account AND i.sik = r.sik
		WHERE r.id = $2 AND i.agent_id IN (SELECT id FROM agents WHERE owner_id = $1)
		  AND r.rail_account IN (SELECT rail_account FROM rail_account_owners WHERE owner_id = $1 AND revoked_at IS NULL)`,
		ownerID, recordID)
	if err != nil {
		return InclusionProof{}, classify(err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanAuditRecord)
	if errors.Is(err, pgx.ErrNoRows) {
		return InclusionProof{}, fmt.Errorf("%w: audit record %d", ErrNotFound, recordID)
	}
	if err != nil {
		return InclusionProof{}, classify(err)
	}
	if rec.LeafIndex == nil {
		return InclusionProof{}, fmt.Errorf("%w: record %d", ErrNotSealed, recordID)
	}
	cp, err := checkpointAt(ctx, s.pool, rec.RailAccount, treeSize)
	if err != nil {
		return InclusionProof{}, classify(err)
	}
	if *rec.LeafIndex >= cp.TreeSize {
		return InclusionProof{}, fmt.Errorf("%w: record %d is leaf %d, after the tree of size %d", ErrProofRange, recordID, *rec.LeafIndex, cp.TreeSize)
	}
	p, err := tlog.ProveRecord(cp.TreeSize, *rec.LeafIndex, s.hashReader(ctx, rec.RailAccount))
	if err != nil {
		return InclusionProof{}, classify(err)
	}
	return InclusionProof{Record: rec, Checkpoint: cp, Proof: p}, nil
}

// ConsistencyProof proves that railAccount's tree at checkpoint size to
// (0: the latest) extends its tree at checkpoint size from.
type ConsistencyProof struct {
	From, To AuditCheckpoint
	Proof    tlog.TreeProof
}

// AuditConsistencyProof returns the consistency proof between two of
// railAccount's checkpoints. The caller authorizes the account.
func (s *Store) AuditConsistencyProof(ctx context.Context, railAccount string, from, to int64) (ConsistencyProof, error) {
	if from < 1 || (to != 0 && to < from) {
		return ConsistencyProof{}, fmt.Errorf("%w: from %d to %d", ErrProofRange, from, to)
	}
	fc, err := checkpointAt(ctx, s.pool, railAccount, from)
	if err != nil {
		return ConsistencyProof{}, classify(err)
	}
	tc, err := checkpointAt(ctx, s.pool, railAccount, to)
	if err != nil {
		return ConsistencyProof{}, classify(err)
	}
	if tc.TreeSize < fc.TreeSize {
		return ConsistencyProof{}, fmt.Errorf("%w: the latest tree (size %d) is smaller than %d", ErrProofRange, tc.TreeSize, from)
	}
	p, err := tlog.ProveTree(tc.TreeSize, fc.TreeSize, s.hashReader(ctx, railAccount))
	if err != nil {
		return ConsistencyProof{}, classify(err)
	}
	return ConsistencyProof{From: fc, To: tc, Proof: p}, nil
}

func (s *Store) hashReader(ctx context.Context, railAccount string) tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) { return readHashes(ctx, s.pool, railAccount, idx) })
}
