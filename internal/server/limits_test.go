package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestListenersBoundWhatAnUnknownCallerMakesThemHold: with no credential
// at all (the agent in the pod, or a cluster neighbour on the HTTP port),
// a caller cannot make Countersign hold a large message or body before it
// is known who asks, nor hold a connection with a body it never finishes.
// Before, a 96 MiB REST body grew the heap by 480 MiB (past the sidecar's
// limit), 48 owner-API calls of 4 MiB by 276 MiB, and 500 stalled bodies
// held 500 connections for ever.
func TestListenersBoundWhatAnUnknownCallerMakesThemHold(t *testing.T) {
	defer func(d time.Duration) { httpBodyTimeout = d }(httpBodyTimeout)
	httpBodyTimeout = 300 * time.Millisecond
	h := start(t, pgtest.NewDatabase(t))
	big := strings.Repeat("x", apiMessageFloor+1)

	// gRPC: the message is refused by its declared length, unread.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := countersignv1.NewOwnerServiceClient(h.conn).CreateAgent(ctx, &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: big}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("a %d-byte owner message = %v; want ResourceExhausted, larger than max", len(big), err)
	}

	// REST, declared length: 413 before the body is read.
	resp, err := http.Post(h.http+"/v1/agents", "application/json", strings.NewReader(`{"displayName":"`+big+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a declared %d-byte REST body = %d %s; want 413", len(big), resp.StatusCode, b)
	}
	// REST, chunked (no declared length): refused once the bound is read.
	resp, err = http.Post(h.http+"/v1/agents", "application/json", io.MultiReader(strings.NewReader(`{"displayName":"`+big), strings.NewReader(`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(b), "too large") {
		t.Fatalf("a chunked %d-byte REST body = %d %s; want a refusal, too large", len(big), resp.StatusCode, b)
	}

	// A body stalled after its headers: the connection is dropped once the
	// body deadline passes.
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.http, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"displayName\":")
	if err := conn.SetReadDeadline(time.Now().Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rest, err := io.ReadAll(bufio.NewReader(conn))
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a body stalled after its headers still held its connection after %s", time.Since(start))
	}
	t.Logf("stalled body: connection ended after %s with %q, %v", time.Since(start).Round(time.Millisecond), firstLine(rest), err)
}

// TestWatchStreamOutlivesTheBodyDeadline: a request without a body (a
// REST watch stream) is not bound by the body deadline: it stays open past
// it and still delivers.
func TestWatchStreamOutlivesTheBodyDeadline(t *testing.T) {
	defer func(d time.Duration) { httpBodyTimeout = d }(httpBodyTimeout)
	httpBodyTimeout = 200 * time.Millisecond
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	applyMandateTo(t, h, m)
	req, err := http.NewRequest(http.MethodGet, "http://"+h.httpAddr+"/v1/approvals:watch", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.ownerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch = %d %s", resp.StatusCode, b)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The stream must stay open past several body deadlines...
	outlived := time.After(5 * httpBodyTimeout)
	for waiting := true; waiting; {
		select {
		case _, ok := <-lines:
			if !ok {
				t.Fatal("the watch stream ended within five body deadlines")
			}
		case <-outlived:
			waiting = false
		}
	}
	// ...and then still deliver the approval of a held request.
	held := h.decide(t, refund("pi_bench", 4200, ""))
	if held.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD {
		t.Fatalf("decide = %s %s; want HOLD", held.GetVerdict(), held.GetReasonCode())
	}
	deadline := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the watch stream ended")
			}
			if strings.Contains(l, held.GetIntent().GetSik()) {
				return
			}
		case <-deadline:
			t.Fatal("the watch stream delivered no approval of the held request within 15s")
		}
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\r\n")
	return s
}

// TestAPIListenerServesBoundedConnections: the API listener serves at most
// apiMaxConns connections at once (with at most apiMaxStreams calls each,
// of at most apiMaxMessage bytes: what unknown callers can make it hold is
// bounded). A connection with a call in flight keeps its slot, and one past
// them waits to be accepted until one closes; a connection with no call in
// flight yields its slot to one that waits.
func TestAPIListenerServesBoundedConnections(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	addr := h.srv.GRPCAddr()
	call := func(within time.Duration) error {
		conn := dialTest(t, addr)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	hold := func(stall bool) []net.Conn {
		var held []net.Conn
		for range apiMaxConns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			if stall {
				stalledCall(t, c)
			}
		}
		return held
	}
	release := func(held []net.Conn) {
		for _, c := range held {
			c.Close()
		}
	}

	// Connections that never call: the next caller gets one's slot.
	idle := hold(false)
	// Well within apiHandshakeTimeout, which would close them anyway.
	if err := call(5 * time.Second); err != nil {
		t.Fatalf("a call past %d idle connections = %v; want it served", apiMaxConns, err)
	}
	release(idle)

	// Connections each with a call in flight (a message stalled mid-body).
	held := hold(true)
	defer func() { release(held) }()
	if err := call(2 * time.Second); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call past %d connections with calls in flight = %v; want it to wait (DeadlineExceeded)", apiMaxConns, err)
	}
	held[0].Close()
	held = held[1:]
	if err := call(10 * time.Second); err != nil {
		t.Fatalf("a call once a connection closed = %v; want it served", err)
	}
}

// stalledCall starts a Health/Check on c whose message declares 100 bytes
// and sends 10: the call stays in flight until the connection closes.
func stalledCall(t *testing.T, c net.Conn) {
	t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/grpc.health.v1.Health/Check"}, {Name: ":authority", Value: "countersign"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, append([]byte{0, 0, 0, 0, 100}, make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
}

// TestAPIListenerRefusesLargeHeaders: a call whose header block is larger
// than the API listener takes is refused as its headers arrive, not held
// waiting for a message that never comes. grpc-go's own bound is 16 MiB a
// stream: 16 connections of 8 such streams, with no credential, grew the
// heap by 2 GiB.
func TestAPIListenerRefusesLargeHeaders(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	c, err := net.Dial("tcp", h.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/countersign.v1.DecisionService/Decide"}, {Name: ":authority", Value: "countersign"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "x-request-id", Value: strings.Repeat("a", 1<<20)},
	} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The headers in frames of 16 KiB, then nothing: the message never
	// comes. Written while the server's frames are read, as it may stop
	// reading once it has refused them; the framer's writes take turns.
	var writing sync.Mutex
	go func() {
		hb := block.Bytes()
		const chunk = 16 << 10
		writing.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb[:chunk]})
		writing.Unlock()
		for off := chunk; err == nil && off < len(hb); off += chunk {
			end := min(off+chunk, len(hb))
			writing.Lock()
			err = fr.WriteContinuation(1, end == len(hb), hb[off:end])
			writing.Unlock()
		}
	}()
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			// The server closed the connection on the header block.
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the call's 1 MiB of headers were neither refused nor the connection closed within 30s: the server holds them")
			}
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				writing.Lock()
				err := fr.WriteSettingsAck()
				writing.Unlock()
				if err != nil {
					return
				}
			}
		case *http2.RSTStreamFrame:
			return // the stream refused
		case *http2.GoAwayFrame:
			return
		case *http2.HeadersFrame:
			if f.StreamID == 1 {
				return // answered (a trailers-only error status)
			}
		}
	}
}
