package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestOwnerOnTheAPISocketIsNotHeldToTheAgentsBlock: in an injected pod the
// agent shares 127.0.0.1 with the owner's port-forward, and failing on
// purpose with made-up owner tokens it can keep that source blocked, so an
// owner token this process has not seen yet is refused there (429). The
// API listener is a Unix socket on the sidecars' volume, which the agent
// cannot mount: a caller on it is a source of its own, so the owner, from
// the countersign container (`kubectl exec … countersign … --server
// unix:…`), still gets in — to revoke the agent (found by a review; the
// break-glass docs/injection.md describes).
func TestOwnerOnTheAPISocketIsNotHeldToTheAgentsBlock(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	h := startWith(t, pgtest.NewDatabase(t), func(c *config.Config) { c.GRPCAddr = "unix:" + sock },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	_, ownerToken, _, err := ownerauth.Bootstrap(ctx, h.store, "owner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rest := func(token string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.srv.HTTPAddr()+"/v1/agents", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The agent fails from 127.0.0.1, a new made-up token each time, until
	// the source is blocked.
	i := 0
	if !wait.Until(10*time.Second, func() bool {
		i++
		return rest(fmt.Sprintf("cso_%s%04d", strings.Repeat("a", 39), i)) == http.StatusTooManyRequests
	}) {
		t.Fatal("the loopback source never got blocked")
	}
	if s := rest(ownerToken); s != http.StatusTooManyRequests {
		t.Fatalf("the owner's unseen token on the blocked loopback source = %d; the test expects the block to hold it (429)", s)
	}
	conn := dialTest(t, h.srv.GRPCAddr())
	defer conn.Close()
	cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+ownerToken), 5*time.Second)
	defer cancel()
	if _, err := countersignv1.NewOwnerServiceClient(conn).ListAgents(cctx, &countersignv1.ListAgentsRequest{}); err != nil {
		t.Fatalf("the owner on the API socket while the agent keeps 127.0.0.1 blocked: %v; want it admitted", err)
	}
}
