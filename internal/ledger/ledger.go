// Package ledger is Countersign's durable record: the pgx connection pool, the
// one transaction helper, the embedded migrations and every SQL statement the
// product runs. No other package writes SQL.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinel errors returned by the ledger; the API boundary maps them to codes.
var (
	// ErrNotFound means the row asked for does not exist.
	ErrNotFound = errors.New("ledger: not found")
	// ErrUnavailable means the database could not be reached or answered with
	// a connection-level failure. On the money path it always ends in deny.
	ErrUnavailable = errors.New("ledger: unavailable")
	// ErrAttemptNotLive means an attempt may no longer leave for the rail:
	// its lease lapsed, it was answered, or a newer attempt replaced it.
	ErrAttemptNotLive = errors.New("ledger: the attempt is no longer live")
	// ErrInvalidText means a text value holds a character the ledger cannot
	// store (a NUL byte, or one the database encoding lacks): the caller's
	// input is wrong, the ledger is not.
	ErrInvalidText = errors.New("ledger: a text value holds a character the ledger cannot store (such as a NUL byte)")
	// ErrSchemaBehind means the database has migrations still to apply.
	ErrSchemaBehind = errors.New("ledger: schema is behind; run `countersign migrate`")
)

// Poolers the ledger knows how to sit behind (Options.Pooler).
const (
	// PoolerNone: the URL names PostgreSQL itself.
	PoolerNone = "none"
	// PoolerPgBouncer: the URL names a PgBouncer in transaction pooling
	// mode, so consecutive transactions may run on different server
	// sessions and nothing may be left on one.
	PoolerPgBouncer = "pgbouncer"
)

// Options tune the pool. The zero value is usable.
type Options struct {
	// MaxConns caps the pool; 0 keeps pgx's default (max(4, GOMAXPROCS)).
	MaxConns int32
	// ConnectTimeout bounds each new connection; 0 means 5 s.
	ConnectTimeout time.Duration
	// Pooler is what the URL points at: PoolerNone ("" too) or
	// PoolerPgBouncer.
	Pooler string
	// Tracer traces every statement (it may also be a pgx.BatchTracer);
	// nil traces none.
	Tracer pgx.QueryTracer
}

// Store is the ledger handle shared by the whole process.
type Store struct {
	pool   *pgxpool.Pool
	pooled bool
	// observe, when set, is told of every write transaction (WithTxObserver).
	observe TxObserver
	// rows are rows this store saw committed that are never deleted (a
	// mandate's budget row in a currency): a Write from
	// NewWrite relies on them instead of inserting them again.
	rows *knownRows
	// seals is what this process's sealings signed, per rail account
	// (audit.go: a log rewritten under a running sequencer is refused).
	seals *sealMemory
}

// TxObserver is told how long one write transaction (InTx or Apply, all
// its retries included) took and how it ended. op names the transaction
// from a small fixed set (the Op* constants), never anything from a
// request. It runs on the caller's goroutine and must be quick.
type TxObserver func(op string, elapsed time.Duration, err error)

// Operation names a TxObserver is given.
const (
	// OpEngineTx is an InTx called from outside the ledger: the engine's
	// transaction script.
	OpEngineTx = "engine_tx"
	// OpDecisionBatch is an Apply called from outside the ledger: a
	// decision's one-batch write.
	OpDecisionBatch = "decision_batch"
	// OpCommitBatch is a commit the ledger sends as one batch.
	OpCommitBatch = "commit_batch"
	// OpCommit is a commit decided under the intent's lock.
	OpCommit            = "commit"
	OpExpireLeases      = "expire_leases"
	OpReconcileClaim    = "reconcile_claim"
	OpReconcileFinding  = "reconcile_finding"
	OpApprovalDecide    = "approval_decide"
	OpWebhookDelete     = "webhook_delete"
	OpDeadLetterReplay  = "dead_letter_replay"
	OpRailAccountRevoke = "rail_account_revoke"
	OpIntentResolve     = "intent_resolve"
	// OpRevoke is the revocation of an agent, a credential or a mandate.
	OpRevoke = "revoke"
	// OpMandateCreate is a new mandate, which may replace the agent's
	// newest on its account.
	OpMandateCreate = "mandate_create"
)

// WithTxObserver returns a handle on the same pool whose write
// transactions are reported to fn. The handle it is called on is
// unchanged, so two servers sharing one pool each observe their own.
func (s *Store) WithTxObserver(fn TxObserver) *Store {
	c := *s
	c.observe = fn
	return &c
}

// observed reports one write transaction that started at start.
func (s *Store) observed(op string, start time.Time, err error) {
	if s.observe != nil {
		s.observe(op, time.Since(start), err)
	}
}

// beginDurable opens every InTx transaction and pins synchronous_commit to
// on for it (I2), in the same round trip as BEGIN (a statement without
// arguments goes as one simple-protocol query). It is transaction state,
// not session state, so it holds behind a transaction pooler too, where a
// startup parameter cannot be passed.
const beginDurable = "BEGIN; SET LOCAL synchronous_commit = on"

// Open configures a pool for databaseURL. It does not wait for the database:
// a server starts (and answers deny, not ready) while Postgres is down.
func Open(ctx context.Context, databaseURL string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: database URL: %w", err)
	}
	var pooled bool
	switch opts.Pooler {
	case "", PoolerNone:
	case PoolerPgBouncer:
		pooled = true
	default:
		return nil, fmt.Errorf("ledger: unknown pooler %q (want %q or %q)", opts.Pooler, PoolerNone, PoolerPgBouncer)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cfg.ConnConfig.ConnectTimeout = timeout
	cfg.ConnConfig.Tracer = opts.Tracer
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "countersign"
	if pooled {
		// pgx's default caches named prepared statements on the session;
		// behind a transaction pooler the next query may reach a session
		// that never saw them. cache_describe keeps only the statement
		// descriptions, in this process, and sends each query as one
		// self-contained Parse/Bind/Execute with the server's own parameter
		// types (exec and simple_protocol guess them from Go types and send
		// []byte as bytea, which a jsonb column refuses; describe_exec
		// splits a query over two round trips, which a pooler may route to
		// two sessions). The URL's default_query_exec_mode wins, e.g.
		// cache_statement behind PgBouncer >= 1.21 with
		// max_prepared_statements set.
		if !setsExecMode(databaseURL) {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	} else {
		// Every commit, InTx or not, must be durable before its answer
		// leaves (I2), whatever the server's default says. PgBouncer
		// refuses startup parameters it does not track, so pooled stores
		// rely on beginDurable and on Ready's check of the server default.
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ledger: pool: %w", err)
	}
	return &Store{pool: pool, pooled: pooled, rows: &knownRows{}, seals: newSealMemory()}, nil
}

// setsExecMode reports whether databaseURL chooses pgx's query exec mode
// itself. pgconn keeps parameters it does not know as runtime parameters,
// for URLs and keyword/value strings alike.
func setsExecMode(databaseURL string) bool {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return false
	}
	_, ok := cfg.RuntimeParams["default_query_exec_mode"]
	return ok
}

// Close releases every connection.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return classify(err)
	}
	return nil
}

// Tx is a ledger transaction. Its methods are the only way other packages
// touch the database inside a transaction.
type Tx struct {
	tx pgx.Tx
}

const maxTxAttempts = 8

// InTx runs fn in one transaction and commits it, retrying the whole callback
// on serialization failures and deadlocks (fn must therefore be safe to run
// again). Any other error rolls back and is returned; connection failures are
// wrapped with ErrUnavailable.
func (s *Store) InTx(ctx context.Context, fn func(*Tx) error) error {
	return s.inTx(ctx, OpEngineTx, fn)
}

// inTx is InTx reporting its transaction to the observer as op.
func (s *Store) inTx(ctx context.Context, op string, fn func(*Tx) error) (err error) {
	start := time.Now()
	defer func() { s.observed(op, start, err) }()
	for attempt := 1; ; attempt++ {
		err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: beginDurable}, func(tx pgx.Tx) error {
			return fn(&Tx{tx: tx})
		})
		if err == nil {
			return nil
		}
		if !retryable(err) || attempt >= maxTxAttempts {
			return classify(err)
		}
		// Exponential backoff with full jitter, capped, so racing
		// transactions spread out instead of colliding again.
		backoff := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6))) //nolint:gosec // jitter needs no secrecy
		select {
		case <-ctx.Done():
			return classify(errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
	}
}

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return true
		}
	}
	return false
}

// classify wraps connection-level failures with ErrUnavailable so that the
// caller can tell "the ledger is down" from "the ledger said no".
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalidText) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "22021", "22P05": // character_not_in_repertoire, untranslatable_character
			return fmt.Errorf("%w: %w", ErrInvalidText, err)
		}
		// Class 08 (connection exception) and 57P (operator intervention:
		// admin shutdown, crash shutdown, cannot connect now) mean "down".
		if len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code[:3] == "57P") {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// Failures to reach the ledger: dial errors, broken or closed
	// connections, timeouts, TLS. Anything else (a sentinel of this package,
	// a caller's own error) is returned as it is.
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, pgx.ErrTxClosed) || strings.Contains(err.Error(), "conn closed") ||
		strings.Contains(err.Error(), "closed pool") {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
