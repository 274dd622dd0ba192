package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

func filterOf(agentID, railAccount string, states ...countersignv1.IntentState) ledger.IntentFilter {
	f := ledger.IntentFilter{AgentID: agentID, RailAccount: railAccount}
	for _, st := range states {
		if st != countersignv1.IntentState_INTENT_STATE_UNSPECIFIED {
			for name, v := range intentStates {
				if v == st {
					f.States = append(f.States, name)
				}
			}
		}
	}
	return f
}

type intentCursor struct {
	At      time.Time `json:"t"`
	Account string    `json:"a"`
	SIK     string    `json:"s"`
}

// ListIntents pages through the owner's intents, newest first.
func (s *OwnerServer) ListIntents(ctx context.Context, req *countersignv1.ListIntentsRequest) (*countersignv1.ListIntentsResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	n, tok, err := pageArgs(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	var after *ledger.Intent
	if tok != "" {
		var c intentCursor
		if json.Unmarshal([]byte(tok), &c) != nil {
			return nil, status.Error(codes.InvalidArgument, "page_token is not one this server issued")
		}
		after = &ledger.Intent{Key: ledger.Key{RailAccount: c.Account, SIK: c.SIK}, CreatedAt: c.At}
	}
	f := filterOf(req.GetAgentId(), req.GetRailAccount(), req.GetState())
	f.Subject = req.GetSubject()
	its, err := s.store.OwnerIntents(ctx, owner, f, after, n)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListIntentsResponse{}
	for _, it := range its {
		out.Intents = append(out.Intents, toIntent(it))
	}
	if len(its) > 0 {
		last := its[len(its)-1]
		b, err := json.Marshal(intentCursor{At: last.CreatedAt, Account: last.RailAccount, SIK: last.SIK})
		if err != nil {
			return nil, ToStatus(err)
		}
		out.NextPageToken = nextToken(n, string(b), len(its))
	}
	return out, nil
}

// watchPoll and watchOverlap pace WatchIntents: it polls the audit log and
// re-reads a window behind its cursor, because records of concurrent
// decisions commit out of their timestamp order; what it has sent is not
// sent again.
const (
	watchPoll    = 200 * time.Millisecond
	watchOverlap = 5 * time.Second
	// watchPage is how many record positions one read of a poll returns.
	watchPage = 1000
)

// DefaultWatchStreams is how many watch streams (WatchIntents and
// WatchApprovals together) one owner may hold open at once in one process.
// Each polls the shared ledger several times a second for as long as it is
// open, and the owner's call quota charges a stream once, when it opens:
// without a cap one owner could keep thousands polling and slow every
// other owner's decisions.
const DefaultWatchStreams = 8

// watchSlots counts the open watch streams of each owner. Its zero value
// allows DefaultWatchStreams per owner.
type watchSlots struct {
	mu    sync.Mutex
	limit int // 0 means DefaultWatchStreams
	open  map[string]int
}

// acquire takes one of owner's slots; the release it returns gives it back
// (once). It refuses with ResourceExhausted when owner holds every slot.
func (w *watchSlots) acquire(owner string) (release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := w.limit
	if limit <= 0 {
		limit = DefaultWatchStreams
	}
	if w.open[owner] >= limit {
		return nil, withDetails(status.New(codes.ResourceExhausted, fmt.Sprintf(
			"this owner already has %d watch streams open (WatchIntents and WatchApprovals together), the most allowed at once; close one before opening another", limit)),
			"WATCH_STREAMS_EXHAUSTED")
	}
	if w.open == nil {
		w.open = map[string]int{}
	}
	w.open[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.open[owner]--; w.open[owner] <= 0 {
				delete(w.open, owner)
			}
		})
	}, nil
}

// opened reports how many watch streams owner holds open.
func (w *watchSlots) opened(owner string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open[owner]
}

// WithWatchStreams sets how many watch streams one owner may hold open at
// once (n <= 0 means DefaultWatchStreams). Call it before serving.
func (s *OwnerServer) WithWatchStreams(n int) *OwnerServer {
	s.watches.mu.Lock()
	defer s.watches.mu.Unlock()
	s.watches.limit = n
	return s
}

// WatchIntents streams every audited transition of the owner's intents
// from now on, each with the intent as it stands. An owner holds at most
// DefaultWatchStreams watch streams at once (WithWatchStreams).
func (s *OwnerServer) WatchIntents(req *countersignv1.WatchIntentsRequest, stream grpc.ServerStreamingServer[countersignv1.WatchIntentsResponse]) error {
	ctx := stream.Context()
	owner, err := s.owner(ctx)
	if err != nil {
		return err
	}
	release, err := s.watches.acquire(owner)
	if err != nil {
		return err
	}
	defer release()
	f := filterOf(req.GetAgentId(), req.GetRailAccount(), req.GetStates()...)
	// The cursor starts on the ledger's clock, which stamps the records:
	// started on this process's, a ledger clock more than watchOverlap
	// behind it hid every transition until it caught up.
	start, err := s.store.ClockMicros(ctx)
	if err != nil {
		return ToStatus(err)
	}
	w := transitionWatch{cursor: start, sent: map[int64]int64{}}
	t := time.NewTicker(watchPoll)
	defer t.Stop()
	for {
		if err := s.pollTransitions(ctx, owner, f, &w, stream); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return ToStatus(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// transitionWatch is where one WatchIntents stream stands: the newest
// at_micros it has sent, and the records it has sent within the overlap
// window behind that (record id → at_micros).
type transitionWatch struct {
	cursor int64
	sent   map[int64]int64
}

// pollTransitions sends every transition recorded in the overlap window
// behind w's cursor, or later, that w has not sent yet. It pages through
// the window's positions to its end, however many records it holds (a
// full page of records already sent must not hide the ones after it), and
// reads in full only the records it has not sent.
func (s *OwnerServer) pollTransitions(ctx context.Context, owner string, f ledger.IntentFilter, w *transitionWatch,
	stream grpc.ServerStreamingServer[countersignv1.WatchIntentsResponse],
) error {
	page := s.watchPage
	if page <= 0 {
		page = watchPage
	}
	// Ids are positive: (since, 0) comes before every record at since.
	pos := ledger.TransitionPos{AtMicros: w.cursor - watchOverlap.Microseconds()}
	for {
		ps, err := s.store.OwnerTransitionPositions(ctx, owner, f, pos, page)
		if err != nil {
			return err
		}
		var unsent []int64
		for _, p := range ps {
			if _, ok := w.sent[p.ID]; !ok {
				unsent = append(unsent, p.ID)
			}
		}
		trs, err := s.store.OwnerTransitions(ctx, owner, unsent)
		if err != nil {
			return err
		}
		for _, tr := range trs {
			if err := stream.Send(&countersignv1.WatchIntentsResponse{Transition: toAuditRecord(tr.AuditRecord), Intent: toIntent(tr.Intent)}); err != nil {
				return err
			}
		}
		// A record that is no longer the owner's between the two reads is
		// passed over like one sent.
		for _, p := range ps {
			if _, ok := w.sent[p.ID]; !ok {
				w.sent[p.ID] = p.AtMicros
				w.cursor = max(w.cursor, p.AtMicros)
			}
		}
		if len(ps) < page {
			break
		}
		pos = ps[len(ps)-1]
	}
	// The next poll reads from cursor-overlap on: what lies behind it is
	// never read again.
	for id, at := range w.sent {
		if at < w.cursor-watchOverlap.Microseconds() {
			delete(w.sent, id)
		}
	}
	return nil
}

func toAuditRecord(r ledger.AuditRecord) *countersignv1.AuditRecord {
	ev := countersignv1.IntentEvent_value["INTENT_EVENT_"+r.Event]
	h := r.Leaf().LeafHash()
	return &countersignv1.AuditRecord{RecordId: r.ID, RailAccount: r.RailAccount, Sik: r.SIK,
		FromState: intentStates[r.FromState], ToState: intentStates[r.ToState], Event: countersignv1.IntentEvent(ev),
		AttemptSeq: int32(r.AttemptSeq), Reason: r.Detail, LeafIndex: r.LeafIndex, LeafHash: hex.EncodeToString(h[:]), //nolint:gosec // attempt counts are small
		CommitTime: timestamppb.New(time.UnixMicro(r.AtMicros))}
}

// ResolveIntent settles one of the owner's QUARANTINED intents as the owner
// found it at the rail (ledger.Resolve says what each outcome does).
func (s *OwnerServer) ResolveIntent(ctx context.Context, req *countersignv1.ResolveIntentRequest) (*countersignv1.ResolveIntentResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	k := ledger.Key{RailAccount: req.GetRailAccount(), SIK: req.GetSik()}
	it, err := s.store.Resolve(ctx, owner, k, ledger.Resolution{
		Applied:  req.GetResolution() == countersignv1.IntentResolution_INTENT_RESOLUTION_APPLIED,
		EntityID: req.GetRailEntityId(),
		Note:     req.GetNote(),
	})
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.ResolveIntentResponse{Intent: toIntent(it)}, nil
}
