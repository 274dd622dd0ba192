package pgproxy

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
