package engine

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/quota"
)

// ReasonDecisionsLimited refuses a request of an agent that has asked for
// more decisions than Options.DecisionRate allows.
const ReasonDecisionsLimited = "decisions_limited"

// Every decision costs a write to the ledger that every agent of the
// deployment shares: a refusal writes its decision record, an ALLOW its
// intent, hold and attempt. An agent picks how many requests it sends, so
// without a bound one agent (a refusal costs it nothing) would take the
// ledger's throughput and disk from all the others. The bound is a token
// bucket per agent, taken once per request right after the credential
// resolves: keyed by who authenticated, never by what the request says.
// A caller that has failed too often is refused before any lookup
// (quota.Failures); refusals past either bound are recorded at most
// throttledRecordRate a second per agent (or per source, for failures),
// so the owner still sees that its agent was refused, while the rows a
// flood writes stay bounded. Every refusal, recorded or not, is counted in
// countersign_decisions_total.

// throttledRecordRate is how many refusals past a limit are recorded a
// second, per agent or source.
const throttledRecordRate = 1

// limited says whether req is refused for its caller's rate before
// anything else is decided: its agent has no decision left (principal may
// act), or the agent's credentials that resolve but may not act (revoked
// or expired) have none left, or its source or credential failed too
// often (out, from authenticate). The refused credentials of an agent
// share a bucket of their own: charged to the agent's, the holder of a
// leaked credential the owner revoked would keep the agent's new one
// refused; one bucket each, an agent keeping old credentials would
// multiply what it may write. key names whose refusals are recorded
// together.
func (e *Engine) limited(req Request, t target, principal *ledger.Principal, mayAct bool, out Outcome) (Outcome, string, bool) {
	if principal != nil {
		key := "agent\x00" + principal.Agent.ID
		if !mayAct {
			key = "refused\x00" + principal.Agent.ID
		}
		if ok, wait := e.decisions.Allow(key); !ok {
			return e.decisionsRefused(req, t, principal.Agent.ID, wait), key, true
		}
		return Outcome{}, "", false
	}
	if out.ReasonCode == ReasonTooManyFailures {
		return out, "peer\x00" + req.Peer, true
	}
	return Outcome{}, "", false
}

// decisionsRefused is the refusal of a request whose agent has no decision
// left: nothing was read or written for it, and the agent is told when to
// come back (Retry-After, whole seconds).
func (e *Engine) decisionsRefused(req Request, t target, agentID string, wait time.Duration) Outcome {
	secs := quota.RetryAfterSeconds(wait)
	out := refuseRail(t.acct, req, ReasonDecisionsLimited, fmt.Sprintf(
		"Agent %s has asked for more decisions than Countersign allows one agent (%s a second, %d at once), "+
			"so this request was not decided; no money moved. Retry after %ds.",
		agentID, strconv.FormatFloat(e.opts.DecisionRate, 'g', -1, 64), max(e.opts.DecisionBurst, 1), secs), http.StatusTooManyRequests)
	out.AgentID = agentID
	out.ResponseHeaders = map[string]string{"retry-after": strconv.FormatInt(secs, 10)}
	return out
}

// recordThrottled records out, a refusal past a limit, if key's refusals
// have not been recorded in the last 1/throttledRecordRate seconds; the
// others are answered unrecorded.
func (e *Engine) recordThrottled(ctx context.Context, req Request, p *ledger.Principal, out Outcome, key string) Outcome {
	if ok, _ := e.throttled.Allow(key); !ok {
		return out
	}
	return e.record(ctx, req, p, out)
}
