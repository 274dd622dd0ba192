package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
)

// ReasonRailReadsLimited refuses a request that needs a read at the rail
// when its agent's requests have used up their rail reads on the account.
const ReasonRailReadsLimited = "rail_reads_limited"

// errRailReadsLimited is what a metered client answers instead of sending
// a read the agent's bucket has no token for.
var errRailReadsLimited = errors.New("engine: the agent's rail reads on this account are used up")

// A rail account's rate limit is account-wide (Stripe's live mode allows
// about 100 requests a second, reads included) and is shared with the
// owner's own systems: checkout, the reconciler, other agents. Every new
// request an agent sends costs a read there (the referent's resolve, an
// MCP tool's description, the listing that confirms a reported "applied"),
// and the agent picks how many it sends. So the reads one agent's requests
// cause on one account come out of one token bucket (Options.RailReadRate,
// RailReadBurst), taken right before each read: per request the client
// sends, so an action whose resolve reads nothing (a Stripe payout) costs
// nothing, and a listing costs one per page. Answers from the ledger and
// refusals before the rail read cost nothing either.

// railReadKey is the bucket of agentID's reads on account: keyed by who
// authenticated, never by anything the request says.
func railReadKey(agentID, account string) string { return agentID + "\x00" + account }

// meteredClient is a rail client for the reads one agent's request causes:
// each request it sends first takes a token from the agent's bucket on the
// account, and one without a token is not sent.
type meteredClient struct {
	next rail.Client
	take func() (bool, time.Duration)
	// refusedFor is, once a read was refused, how long until the bucket
	// holds one again (in nanoseconds; 0 while none was refused).
	refusedFor atomic.Int64
}

// meter wraps c for the reads agentID's request causes on acct.
func (e *Engine) meter(c rail.Client, agentID string, acct *rails.Account) *meteredClient {
	key := railReadKey(agentID, acct.ID)
	return &meteredClient{next: c, take: func() (bool, time.Duration) { return e.railReads.Allow(key) }}
}

// client is the metered client to hand an adapter; nil when there is no
// client to meter (the adapter reports that itself).
func (c *meteredClient) client() rail.Client {
	if c.next == nil {
		return nil
	}
	return c
}

// Do implements rail.Client.
func (c *meteredClient) Do(ctx context.Context, method, path string, headers map[string]string, body []byte) (*http.Response, error) {
	if ok, wait := c.take(); !ok {
		c.refusedFor.Store(int64(max(wait, time.Nanosecond)))
		return nil, errRailReadsLimited
	}
	return c.next.Do(ctx, method, path, headers, body)
}

// limited reports whether a read was refused, and how long until the
// agent's bucket holds one again. Whatever the adapter made of the refused
// read, the request is refused for it (an adapter need not keep the error).
func (c *meteredClient) limited() (time.Duration, bool) {
	d := time.Duration(c.refusedFor.Load())
	return d, d > 0
}

// railReadsRefused is the refusal of a request whose read the agent's
// bucket refused: nothing was read, nothing written but the decision, and
// the agent is told when to come back (Retry-After, whole seconds).
func (e *Engine) railReadsRefused(acct *rails.Account, req Request, agentID string, wait time.Duration) Outcome {
	secs := quota.RetryAfterSeconds(wait)
	out := refuseRail(acct, req, ReasonRailReadsLimited, fmt.Sprintf(
		"Agent %s's requests have caused more reads at rail account %s than Countersign allows one agent (%s a second, %d at once), "+
			"and the rail's rate limit is shared with the owner's other systems, so this request was not checked at the rail; no money moved. Retry after %ds.",
		agentID, acct.ID, strconv.FormatFloat(e.opts.RailReadRate, 'g', -1, 64), max(e.opts.RailReadBurst, 1), secs), http.StatusTooManyRequests)
	out.ResponseHeaders = map[string]string{"retry-after": strconv.FormatInt(secs, 10)}
	return out
}
