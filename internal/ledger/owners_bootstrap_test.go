package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// The owner-token bootstrap path (internal/ownerauth) against the real ledger: a first owner and token, the
// token admitted, then refused once revoked or expired.
func TestBootstrapTokenAgainstTheLedger(t *testing.T) {
	ctx := context.Background()
	store, err := ledger.Open(ctx, pgtest.NewDatabase(t), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	owner, secret, tok, err := ownerauth.Bootstrap(ctx, store, "ops", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(owner.ID, "own_") || !strings.HasPrefix(tok.ID, "otk_") || tok.OwnerID != owner.ID {
		t.Fatalf("Bootstrap = %+v, %+v", owner, tok)
	}
	now := time.Now()
	a, err := ownerauth.New(ownerauth.Config{Now: func() time.Time { return now }}, store)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Authenticate(ctx, "Bearer "+secret)
	if err != nil || got != (ownerauth.Owner{ID: owner.ID, Subject: tok.ID, Method: ownerauth.MethodToken}) {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}

	// A second token of the same owner, issued to expire.
	second, _, err := ownerauth.IssueToken(ctx, store, owner.ID, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := a.Authenticate(ctx, "Bearer "+second); !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}

	if err := store.RevokeOwnerToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); !errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked token: %v", err)
	}
	if _, _, err := ownerauth.IssueToken(ctx, store, "own_nobodyaaaaaaaaaaa", time.Now().Add(time.Hour)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("token for an unknown owner: %v, want ErrNotFound", err)
	}
	if _, _, _, err := ownerauth.Bootstrap(ctx, store, "ops", 0); err == nil {
		t.Fatal("a bootstrap token without a lifetime was issued")
	}
}
