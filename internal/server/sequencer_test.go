package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func proposeAudited(t *testing.T, store *ledger.Store, n int) {
	t.Helper()
	for i := range n {
		sik := strings.NewReplacer("0", "A", "1", "B", "8", "C", "9", "D").Replace(fmt.Sprintf("SEQSIK%026d", i))
		k := ledger.Key{RailAccount: "acct_seq", SIK: sik}
		if err := ledgertest.InFlight(context.Background(), store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_1",
			AmountMinor: 100, Currency: "USD", Canonical: "{}"}, sik); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServeSealsWithAKey: with --audit-signing-key, serve's sequencer seals
// new audit records into the signed log within a few intervals.
func TestServeSealsWithAKey(t *testing.T) {
	key, pub, _, err := audit.WriteKeyPair(t.TempDir(), "serve.test")
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := audit.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	h := startWith(t, pgtest.NewDatabase(t), func(c *config.Config) {
		c.AuditSigningKey, c.AuditSealInterval = key, 20*time.Millisecond
	}, slog.New(slog.NewTextHandler(&syncBuffer{}, nil)))
	proposeAudited(t, h.store, 4)
	var rep ledger.AuditReport
	sealed := wait.Until(10*time.Second, func() bool {
		rep, err = h.store.VerifyAudit(context.Background(), ledger.AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
		return err == nil && rep.Sealed == 4
	})
	if !sealed || !rep.Ok() || rep.Unsealed != 0 {
		t.Fatalf("serve with a key did not seal the 4 records (one birth each): %+v, %v", rep, err)
	}
	if code, body := h.get(t, "/metrics"); code != 200 || !strings.Contains(body, "countersign_audit_sealed_records_total 4") {
		t.Fatalf("/metrics = %d, lacks countersign_audit_sealed_records_total 4", code)
	}
}

// TestServeWithoutAKeySaysItDoesNotSeal: without a key nothing is sealed,
// and the log says so once, at start.
func TestServeWithoutAKeySaysItDoesNotSeal(t *testing.T) {
	var logs syncBuffer
	h := startWith(t, pgtest.NewDatabase(t), nil, slog.New(slog.NewTextHandler(&logs, nil)))
	if n := strings.Count(logs.String(), "audit sealing is off"); n != 1 {
		t.Fatalf("the log says %d times that sealing is off, want once:\n%s", n, logs.String())
	}
	proposeAudited(t, h.store, 1)
	rep, err := h.store.VerifyAudit(context.Background(), ledger.AuditVerifyOptions{})
	if err != nil || rep.Sealed != 0 || rep.Unsealed != 1 {
		t.Fatalf("verify = %+v, %v; want 1 unsealed record (its birth)", rep, err)
	}
}
