package reconcile

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
)

// scopeRecorder records the scope and limits a pass hands the ledger.
type scopeRecorder struct {
	expired, claimed []ledger.ReconcileScope
	limits           []int
}

func (s *scopeRecorder) ExpireLeasesIn(_ context.Context, _ int, _ time.Duration, scope ledger.ReconcileScope) (int, error) {
	s.expired = append(s.expired, scope)
	return 0, nil
}

func (s *scopeRecorder) ClaimReconcileIn(_ context.Context, _ string, _ time.Duration, limit int, scope ledger.ReconcileScope) ([]ledger.ReconcileWork, error) {
	s.claimed, s.limits = append(s.claimed, scope), append(s.limits, limit)
	return nil, nil
}

func (s *scopeRecorder) RecordFinding(context.Context, ledger.Finding) (ledger.Intent, error) {
	return ledger.Intent{}, nil
}

// TestPassInKeepsToItsScopeAndLimit: an owner's pass hands its scope to
// both the lease expiry and the claim, and claims at most its limit,
// bounded by the worker's batch (0 is the batch); Pass is the whole
// ledger, or one intent.
func TestPassInKeepsToItsScopeAndLimit(t *testing.T) {
	one := ledger.Key{RailAccount: "acct_1", SIK: "S"}
	owners := ledger.ReconcileScope{OwnerID: "own_a", RailAccount: "acct_1"}
	cases := []struct {
		name      string
		pass      func(w *Worker) error
		wantScope ledger.ReconcileScope
		wantLimit int
	}{
		{"an owner's batch under the worker's", func(w *Worker) error { _, err := w.PassIn(context.Background(), owners, 3); return err }, owners, 3},
		{"an owner's batch over the worker's", func(w *Worker) error { _, err := w.PassIn(context.Background(), owners, 500); return err }, owners, 8},
		{"an owner's batch of 0", func(w *Worker) error { _, err := w.PassIn(context.Background(), owners, 0); return err }, owners, 8},
		{"the reconciler's pass", func(w *Worker) error { _, err := w.Pass(context.Background(), nil); return err }, ledger.ReconcileScope{}, 8},
		{"one intent", func(w *Worker) error { _, err := w.Pass(context.Background(), &one); return err }, ledger.ReconcileScope{Only: &one}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &scopeRecorder{}
			w := New(l, oneAccount{}, Options{Batch: 8}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err := tc.pass(w); err != nil {
				t.Fatal(err)
			}
			if len(l.claimed) != 1 || len(l.expired) != 1 || l.claimed[0] != tc.wantScope || l.expired[0] != tc.wantScope || l.limits[0] != tc.wantLimit {
				t.Fatalf("expired in %+v, claimed in %+v with limits %v; want %+v and %d", l.expired, l.claimed, l.limits, tc.wantScope, tc.wantLimit)
			}
		})
	}
}
