package pgproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m, nil)) }

// msg is one protocol message: type, length, payload.
func msg(typ byte, payload string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(payload)))
	return append(b, payload...)
}

func complete(tag string) []byte { return msg('C', tag+"\x00") }
func ready(status byte) []byte   { return msg('Z', string(status)) }
func failure() []byte            { return msg('E', "SERROR\x00C40001\x00Mcould not serialize\x00\x00") }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// step is one client request and the server's whole answer to it, which
// the fake server writes in pieces of split bytes (0: at once).
type step struct {
	request []byte
	answer  []byte
	split   int
}

func TestProxyCountsAKnownExchange(t *testing.T) {
	sslRequest := make([]byte, 8)
	binary.BigEndian.PutUint32(sslRequest, 8)
	binary.BigEndian.PutUint32(sslRequest[4:], sslRequestCode)
	query := msg('Q', "SELECT 1\x00")
	steps := []step{
		// Negotiation refused, then a startup answered in one burst.
		{request: sslRequest, answer: []byte("N")},
		{request: []byte("startup"), answer: cat(msg('R', "\x00\x00\x00\x00"), msg('S', "a\x00b\x00"), ready('I'))},
		// An implicit transaction, its answer split across many writes.
		{request: query, answer: cat(msg('T', "rowdesc"), msg('D', "row"), complete("SELECT 1"), ready('I')), split: 3},
		// An explicit block over three round trips: one commit.
		{request: query, answer: cat(complete("BEGIN"), ready('T'))},
		{request: query, answer: cat(complete("INSERT 0 1"), ready('T'))},
		{request: query, answer: cat(complete("COMMIT"), ready('I'))},
		// A block that fails and is rolled back: one rollback.
		{request: query, answer: cat(complete("BEGIN"), ready('T'))},
		{request: query, answer: cat(failure(), ready('E'))},
		{request: query, answer: cat(complete("ROLLBACK"), ready('I'))},
		// COMMIT itself fails (a serialization failure at commit).
		{request: query, answer: cat(complete("BEGIN"), ready('T'))},
		{request: query, answer: cat(failure(), ready('I'))},
		// A parse and describe only (a statement prepared): PostgreSQL
		// runs it in a transaction of its own.
		{request: query, answer: cat(msg('1', ""), msg('t', "\x00\x00"), msg('n', ""), ready('I'))},
		// Closing a prepared statement runs no transaction.
		{request: query, answer: cat(msg('3', ""), ready('I'))},
		// A statement that fails outside a block; a Sync with no statement.
		{request: query, answer: cat(failure(), ready('I'))},
		{request: msg('S', ""), answer: ready('I')},
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		for _, s := range steps {
			if _, err := io.ReadFull(c, make([]byte, len(s.request))); err != nil {
				served <- err
				return
			}
			for rest := s.answer; len(rest) > 0; {
				n := len(rest)
				if s.split > 0 {
					n = min(n, s.split)
				}
				if _, err := c.Write(rest[:n]); err != nil {
					served <- err
					return
				}
				rest = rest[n:]
			}
		}
		served <- nil
	}()

	p, err := Start(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, s := range steps {
		if _, err := c.Write(s.request); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, len(s.answer))); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	got := p.Counts()
	want := Counts{Conns: 1, RoundTrips: int64(len(steps)), Commits: 3, Rollbacks: 3}
	if got != want {
		t.Fatalf("counts = %+v, want %+v", got, want)
	}
	if got.Transactions() != 6 || got.Sub(Counts{RoundTrips: 3}).RoundTrips != int64(len(steps))-3 {
		t.Fatalf("Transactions/Sub: %+v", got)
	}
}

// TestWireReaderAcrossAnySplit feeds one stream in every chunk size: the
// messages cross chunk boundaries anywhere, the count does not change.
func TestWireReaderAcrossAnySplit(t *testing.T) {
	stream := cat(msg('R', "\x00\x00\x00\x00"), ready('I'),
		complete("BEGIN"), ready('T'), complete("UPDATE 1"), ready('T'), complete("COMMIT"), ready('I'),
		complete("INSERT 0 1"), ready('I'),
		complete("BEGIN"), ready('T'), complete("ROLLBACK"), ready('I'))
	for size := 1; size <= len(stream); size++ {
		var r wireReader
		var commits, rollbacks int64
		for rest := stream; len(rest) > 0; {
			n := min(size, len(rest))
			c, rb, ok := r.feed(rest[:n])
			if !ok {
				t.Fatalf("chunk size %d: lost the protocol", size)
			}
			commits, rollbacks = commits+c, rollbacks+rb
			rest = rest[n:]
		}
		if commits != 2 || rollbacks != 1 {
			t.Fatalf("chunk size %d: %d commits, %d rollbacks; want 2 and 1", size, commits, rollbacks)
		}
	}
	var r wireReader
	if _, _, ok := r.feed([]byte{'Z', 0, 0, 0, 1}); ok {
		t.Fatal("a message length below 4 was accepted")
	}
}

// TestProxyAgainstPostgreSQL: through the proxy, pgx's ordinary calls cost
// the round trips and transactions a reader of the protocol expects.
func TestProxyAgainstPostgreSQL(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbHost := u.Host
	p, err := Start(ctx, dbHost)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u.Host = p.Addr()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE t (v int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	// Every statement below once, so each is prepared before it is counted.
	batch := func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`SELECT 1`)
		b.Queue(`SELECT count(*) FROM t`)
		b.Queue(`SELECT 2`)
		return b
	}
	insert := func(v int) error { _, err := conn.Exec(ctx, `INSERT INTO t (v) VALUES ($1)`, v); return err }
	if err := insert(0); err != nil {
		t.Fatal(err)
	}
	if err := conn.SendBatch(ctx, batch()).Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		do   func() error
		want Counts
	}{
		{"one statement", func() error { return insert(1) }, Counts{RoundTrips: 1, Commits: 1}},
		{"a block of one statement", func() error {
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO t (v) VALUES ($1)`, 2); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}, Counts{RoundTrips: 3, Commits: 1}},
		{"a pipelined batch", func() error { return conn.SendBatch(ctx, batch()).Close() }, Counts{RoundTrips: 1, Commits: 1}},
		{"a block rolled back", func() error {
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			return tx.Rollback(ctx)
		}, Counts{RoundTrips: 2, Rollbacks: 1}},
		{"a statement that fails", func() error {
			if insert(1) == nil {
				return errors.New("a duplicate key was accepted")
			}
			return nil
		}, Counts{RoundTrips: 1, Rollbacks: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Counts()
			if err := tc.do(); err != nil {
				t.Fatal(err)
			}
			if got := p.Counts().Sub(before); got != tc.want {
				t.Fatalf("counts = %+v, want %+v", got, tc.want)
			}
		})
	}

	// PostgreSQL's own count agrees over the connection's whole life, once
	// the backend has exited (it reports its counts then) — plus the one
	// transaction each backend runs as it starts, which the client never
	// sees.
	conn.Close(ctx)
	admin := *u
	admin.Host, admin.Path = dbHost, "/postgres"
	ac, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close(ctx)
	db := strings.TrimPrefix(u.Path, "/")
	if !wait.Until(30*time.Second, func() bool {
		var n int
		return ac.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n) == nil && n == 0
	}) {
		t.Fatal("the backend did not exit")
	}
	var commits, rollbacks int64
	if err := ac.QueryRow(ctx, `SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1`, db).Scan(&commits, &rollbacks); err != nil {
		t.Fatal(err)
	}
	if got := p.Counts(); got.Commits+got.Conns != commits || got.Rollbacks != rollbacks {
		t.Errorf("the proxy saw %d commits over %d connections and %d rollbacks; pg_stat_database counted %d and %d",
			got.Commits, got.Conns, got.Rollbacks, commits, rollbacks)
	}
}
