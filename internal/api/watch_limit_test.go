package api

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/wait"
)

// An owner holds at most DefaultWatchStreams watch streams open at once
// (WatchIntents and WatchApprovals together): the next is refused with
// ResourceExhausted, another owner is not affected, and a stream that ends
// gives its slot back.
func TestWatchStreamsAreCappedPerOwner(t *testing.T) {
	srv, _, conn := servedOwnerAPI(t)
	client := countersignv1.NewOwnerServiceClient(conn)
	base, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	asOwner := func(owner string) context.Context {
		return metadata.AppendToOutgoingContext(base, "x-test-owner", owner)
	}

	// WatchApprovals answers Synced once it runs, so it shows admission;
	// WatchIntents sends nothing until a transition, so the server's count
	// shows it.
	approvals := func(owner string) (context.CancelFunc, error) {
		ctx, stop := context.WithCancel(asOwner(owner))
		st, err := client.WatchApprovals(ctx, &countersignv1.WatchApprovalsRequest{})
		if err == nil {
			var m *countersignv1.WatchApprovalsResponse
			if m, err = st.Recv(); err == nil && !m.GetSynced() {
				t.Fatalf("first message %v, want synced (no approvals)", m)
			}
		}
		if err != nil {
			stop()
			return nil, err
		}
		return stop, nil
	}
	var stops []context.CancelFunc
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for i := range DefaultWatchStreams {
		if i%2 == 0 {
			stop, err := approvals("own_b")
			if err != nil {
				t.Fatalf("stream %d refused: %v", i, err)
			}
			stops = append(stops, stop)
			continue
		}
		ctx, stop := context.WithCancel(asOwner("own_b"))
		stops = append(stops, stop)
		if _, err := client.WatchIntents(ctx, &countersignv1.WatchIntentsRequest{}); err != nil {
			t.Fatal(err)
		}
		if !wait.Until(10*time.Second, func() bool { return srv.watches.opened("own_b") == i+1 }) {
			t.Fatalf("stream %d: %d open, want %d", i, srv.watches.opened("own_b"), i+1)
		}
	}

	// One more of either kind is refused, with a reason.
	if _, err := approvals("own_b"); code(err) != codes.ResourceExhausted {
		t.Fatalf("WatchApprovals beyond the cap: %v, want ResourceExhausted", err)
	}
	st, err := client.WatchIntents(asOwner("own_b"), &countersignv1.WatchIntentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); code(err) != codes.ResourceExhausted {
		t.Fatalf("WatchIntents beyond the cap: %v, want ResourceExhausted", err)
	}
	// Another owner is not affected.
	stopA, err := approvals("own_a")
	if err != nil {
		t.Fatalf("another owner's stream refused: %v", err)
	}
	stopA()

	// A stream that ends gives its slot back.
	stops[0]()
	if !wait.Until(10*time.Second, func() bool { return srv.watches.opened("own_b") == DefaultWatchStreams-1 }) {
		t.Fatalf("after one stream ended, %d open", srv.watches.opened("own_b"))
	}
	stop, err := approvals("own_b")
	if err != nil {
		t.Fatalf("a stream after one ended was refused: %v", err)
	}
	stops = append(stops, stop)
	if _, err := approvals("own_b"); code(err) != codes.ResourceExhausted {
		t.Fatalf("beyond the cap again: %v, want ResourceExhausted", err)
	}
	for _, s := range stops {
		s()
	}
	if !wait.Until(10*time.Second, func() bool { return srv.watches.opened("own_b") == 0 }) {
		t.Fatalf("all streams ended, %d still counted open", srv.watches.opened("own_b"))
	}
}

// WithWatchStreams sets the cap.
func TestWatchStreamsCapIsConfigurable(t *testing.T) {
	s := NewOwnerServer(nil, nil).WithWatchStreams(1)
	release, err := s.watches.acquire("own")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.watches.acquire("own"); code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream with a cap of 1: %v", err)
	}
	release()
	release() // a second release gives back nothing more
	if s.watches.opened("own") != 0 {
		t.Fatalf("%d open after release", s.watches.opened("own"))
	}
	r2, err := s.watches.acquire("own")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.watches.acquire("own"); code(err) != codes.ResourceExhausted {
		t.Fatalf("double release freed a second slot: %v", err)
	}
	r2()
}
