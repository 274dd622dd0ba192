package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/wait"
)

// cutProxy is a TCP proxy between countersign and PostgreSQL that the test
// can cut (every connection dropped, new ones refused) and restore.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.closeAll(); p.wg.Wait() })
	return p
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// Cut drops every connection and refuses new ones.
func (p *cutProxy) Cut() { p.cut.Store(true); p.closeAll() }

// Restore lets connections through again.
func (p *cutProxy) Restore() { p.cut.Store(false) }

// TestNoAllowWhileTheLedgerIsCut floods Check with new refunds while the
// path to PostgreSQL is cut and restored: no ALLOW is answered while the
// path is cut, every ALLOW answered is backed by a committed attempt, and
// ALLOWs resume once the path is back.
func TestNoAllowWhileTheLedgerIsCut(t *testing.T) {
	var proxy *cutProxy
	e := newRailEnv(t, envOptions{dbURLRewrite: func(u string) string {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		proxy = newCutProxy(t, parsed.Host)
		parsed.Host = proxy.ln.Addr().String()
		return parsed.String()
	}})
	e.payment("stripe", "pi_cut", 1_000_000_000, "usd")
	conn, err := grpc.NewClient(e.envoyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := authv3.NewAuthorizationClient(conn)

	type answer struct {
		sent, at time.Time
		allowed  bool
		sik      string
	}
	var mu sync.Mutex
	var answers []answer
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := n.Add(1)
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
					ContextExtensions: map[string]string{"rail_account": stripeAccount},
					Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
						Id: fmt.Sprint(i), Method: "POST", Host: "stripe.local", Path: "/v1/refunds",
						Headers: map[string]string{"authorization": "Bearer " + e.secret, "content-type": "application/x-www-form-urlencoded"},
						Body:    fmt.Sprintf("payment_intent=pi_cut&amount=%d", i),
					}}}})
				cancel()
				a := answer{sent: sent, at: time.Now()}
				if err == nil && codes.Code(resp.GetStatus().GetCode()) == codes.OK {
					a.allowed = true
					a.sik = resp.GetDynamicMetadata().GetFields()["countersign"].GetStructValue().GetFields()["sik"].GetStringValue()
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
	}
	// Each phase ends on what it is for, not after a guessed time: traffic
	// is allowed before the cut, and again after it.
	waitFor := func(what string, cond func(a answer) bool, n int) {
		t.Helper()
		if !wait.Until(2*time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			seen := 0
			for _, a := range answers {
				if cond(a) {
					seen++
				}
			}
			return seen >= n
		}) {
			close(stop)
			wg.Wait()
			t.Fatalf("no %s within the deadline", what)
		}
	}
	allowedSince := func(since time.Time) func(answer) bool {
		return func(a answer) bool { return a.allowed && !a.sent.Before(since) }
	}
	waitFor("ALLOW before the cut", allowedSince(time.Time{}), 1)
	proxy.Cut()
	cutAt := time.Now() // every request sent from now on meets the cut
	// The outage lasts until enough requests sent inside it were answered
	// (each a deny, or the test fails below).
	waitFor("answers to requests sent during the cut", func(a answer) bool { return !a.sent.Before(cutAt) }, 8)
	restoreAt := time.Now()
	proxy.Restore()
	waitFor("ALLOW after the pool reconnected", allowedSince(restoreAt), 1)
	close(stop)
	wg.Wait()

	// A request sent before the cut may have committed its attempt in time
	// and be answered ALLOW a moment into it. One sent during the cut, and
	// answered before the ledger was back, cannot have been.
	before, during, after := 0, 0, 0
	var allowed []answer
	for _, a := range answers {
		if !a.allowed {
			continue
		}
		allowed = append(allowed, a)
		switch {
		case a.sent.Before(cutAt):
			before++
		case a.at.Before(restoreAt):
			during++
			t.Errorf("ALLOW sent %s and answered %s into the cut", a.sent.Sub(cutAt), a.at.Sub(cutAt))
		default:
			after++
		}
	}
	t.Logf("%d answers: %d ALLOW before the cut, %d during, %d after", len(answers), before, during, after)
	if before == 0 || after == 0 {
		t.Fatalf("the test proved nothing: %d ALLOW before the cut, %d after", before, after)
	}
	// Every ALLOW is backed by a durable attempt (I2).
	for _, a := range allowed {
		_, atts, err := e.store.GetIntent(context.Background(), ledger.Key{RailAccount: stripeAccount, SIK: a.sik})
		if err != nil || len(atts) == 0 {
			t.Fatalf("ALLOW for %s has no committed attempt: %v", a.sik, err)
		}
	}
}
