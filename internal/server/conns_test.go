package server

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestAnUnknownCallerCannotHoldEveryAPIConnection: a caller with no
// credential (the agent in the pod) opens apiMaxConns connections to the
// API listener and asks each for a grpc.health.v1 Health/Watch stream, then
// keeps the connections. An owner's call with a valid token still gets
// through, at once. Before, each watch stayed open for as long as its
// caller liked, the listener accepted no seventeenth connection, and the
// owner's call never reached the server (MaxConnectionIdle never freed a
// connection with a stream open).
func TestAnUnknownCallerCannotHoldEveryAPIConnection(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	_, ownerToken, _, err := ownerauth.Bootstrap(ctx, h.store, "victim owner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ownerCall := func() error {
		conn := dialTest(t, h.srv.GRPCAddr())
		defer conn.Close()
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+ownerToken), 5*time.Second)
		defer cancel()
		_, err := countersignv1.NewOwnerServiceClient(conn).ListAgents(cctx, &countersignv1.ListAgentsRequest{})
		return err
	}
	if err := ownerCall(); err != nil {
		t.Fatalf("owner call before the attack: %v", err)
	}

	actx, stopAttack := context.WithCancel(ctx)
	defer stopAttack()
	var ended atomic.Int32
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range apiMaxConns {
		c, err := grpc.NewClient(h.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		st, err := healthpb.NewHealthClient(c).Watch(actx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		go func() {
			for m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				if m, err = st.Recv(); err != nil {
					return
				}
			}
			if _, err := st.Recv(); errors.Is(err, io.EOF) {
				ended.Add(1)
			}
		}()
	}
	// Each watch ended once it had said SERVING. (Waited for before the
	// owner's call: that call may close an idle attacker connection for
	// its slot, and one closed before its client read the watch's end
	// would read as an error, not as the end.)
	if !wait.Until(10*time.Second, func() bool { return ended.Load() == apiMaxConns }) {
		t.Fatalf("%d of %d health watches on the API listener ended after SERVING", ended.Load(), apiMaxConns)
	}
	// The attacker keeps its connections; the owner still gets in.
	if err := ownerCall(); err != nil {
		t.Fatalf("owner call with %d unauthenticated connections open, each having watched health: %v", apiMaxConns, err)
	}
	// Health/Check, which probes and the e2e tests use, still answers.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r, err := healthpb.NewHealthClient(h.conn).Check(cctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Health/Check = %v, %v; want SERVING", r, err)
	}
}

// TestAPIConnectionsAndTheirStreamsAreBoundByAge: an owner's watch stream
// on the API listener ends once its connection is older than
// apiMaxConnectionAge plus its grace, so that no stream holds a connection
// slot for ever.
func TestAPIConnectionsAndTheirStreamsAreBoundByAge(t *testing.T) {
	defer func(a, g time.Duration) { apiMaxConnectionAge, apiMaxConnectionAgeGrace = a, g }(apiMaxConnectionAge, apiMaxConnectionAgeGrace)
	apiMaxConnectionAge, apiMaxConnectionAgeGrace = 500*time.Millisecond, 500*time.Millisecond
	h := start(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	_, ownerToken, _, err := ownerauth.Bootstrap(ctx, h.store, "owner", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	conn := dialTest(t, h.srv.GRPCAddr())
	defer conn.Close()
	sctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+ownerToken), 30*time.Second)
	defer cancel()
	st, err := countersignv1.NewOwnerServiceClient(conn).WatchApprovals(sctx, &countersignv1.WatchApprovalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	var end error
	if !wait.Until(10*time.Second, func() bool {
		select {
		case end = <-done:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("an owner's watch stream outlived its connection's maximum age and grace")
	}
	if code := status.Code(end); code != codes.Unavailable {
		t.Fatalf("the stream ended with %v; want Unavailable (connection closed)", end)
	}
}
