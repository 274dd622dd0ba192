// Package rail is the interface between the engine and a payment rail
// (Stripe, Razorpay, a payment MCP server). An Adapter recognises the rail's
// money-moving requests, resolves their referent with a read-only call,
// stamps them, classifies the rail's answer, and lists what the rail really
// did so the reconciler can settle ambiguous outcomes. Adapters are pure
// apart from the calls they make through the Client they are given.
package rail

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/sik"
)

// Request is an outbound HTTP request as the agent sent it. Header names are
// lower-case; the agent's credential headers are already removed.
type Request struct {
	Method  string
	Host    string
	Path    string // with the query string, as Envoy reports :path
	Headers map[string]string
	Body    []byte
}

// Kind of request an adapter recognised.
type Kind int

// Kinds.
const (
	// KindRead is a read-only call (GET of a payment, a list): no money moves,
	// no intent is written.
	KindRead Kind = iota + 1
	// KindAction is a money-moving call: it becomes an intent.
	KindAction
)

// Action is a recognised money-moving request in the rail's terms, before
// its referent is resolved.
type Action struct {
	Kind sik.Kind // refund, payout, transfer
	// Subject is the rail entity the action is about: the payment (pi_…,
	// ch_…, pay_…) for a refund, the destination (account, fund account)
	// for a payout or transfer. Taken from the request, checked by Resolve.
	Subject string
	// AmountMinor is nil when the request omits the amount (for a refund:
	// a full refund of what is still refundable).
	AmountMinor *int64
	// Currency in upper case; "" when the request does not say (refunds).
	Currency string
	// Payee identifies who receives the money (payouts/transfers: the
	// destination; refunds: the payment's customer when known, else "").
	Payee string
	// Extra holds the request fields that change the meaning of the action
	// and so take part in the SIK (e.g. Stripe refund_application_fee=true,
	// payout "method", Razorpay refund "speed"), as strings. Labels (a
	// refund's reason, metadata/notes) and explicit defaults do not belong
	// here: each adapter's README says where every member stands.
	Extra map[string]string
	// Labels are the request's label members (DESIGN §3: they move no
	// money and stay out of the key), by the member's name as the rail
	// reads it (Stripe metadata[ticket], description; Razorpay
	// notes.ticket, receipt), Countersign's stamp excluded. They are not in
	// the SIK, but an owner's approval covers them: the same action with
	// other labels is not the request the owner approved. A key member
	// whose value may be text the model composed (a Razorpay payout's
	// purpose other than the defaults, an MCP Extra with no list of
	// values) is also here, as free text, so that the mandate's free_text
	// sees it; it stays in the key.
	Labels map[string]Label
	// SentStamp is the value the request carried where Countersign writes
	// its stamp (Stripe metadata[countersign_sik], Razorpay
	// notes.countersign_sik, an MCP tool's metadata argument's
	// countersign_sik), as sent (a JSON value that is not a string as its
	// JSON text); "" when none. It is not a label: ext_proc overwrites it.
	// Where no ext_proc will, the engine allows only the stamp its
	// decision writes there (found by a review: a card number under the
	// stamp key left past free_text: refuse).
	SentStamp string
	// Distinct is the caller's explicit reason to make a second identical
	// action (header x-countersign-distinct), logged verbatim in the audit.
	Distinct string
}

// Label is one label member's value. FreeText is false only for a member
// whose value is one of a fixed set the rail documents (a Stripe refund's
// reason): every other label is text the model composed, which a mandate
// may refuse or hold (free_text).
type Label struct {
	Value    string
	FreeText bool
}

// Parsed is what Parse recognised.
type Parsed struct {
	Kind   Kind
	Action Action // set when Kind == KindAction
	// Tool is the MCP tool a money-moving tools/call names ("" off MCP):
	// what G6's tool-description pins are looked up by. It is not part of
	// the action (a refund is one refund by whatever tool or REST call).
	Tool string
	// ReadSource is, on a read that lists one business account's entities,
	// that account (a RazorpayX payout list's account_number): the rails
	// file restricts it as it restricts a payout's source. "" otherwise.
	ReadSource string
}

// Referent is the resolved subject of an action, read from the rail.
type Referent struct {
	Subject string
	// Currency of the payment (refunds) or of the action (payouts).
	Currency string
	// AmountMinor is the payment's captured amount (refunds).
	AmountMinor int64
	// RefundableMinor is what the rail says is still refundable (refunds).
	RefundableMinor int64
	// Payee is the payment's customer or the destination, when known.
	Payee string
}

// Outcome classifies a rail answer (DESIGN.md §4).
type Outcome int

// Outcomes.
const (
	// Applied: 2xx with the created entity.
	Applied Outcome = iota + 1
	// InProgress: the same key is still running at the rail (409); stay
	// IN_FLIGHT, back off, retry with the same key.
	InProgress
	// FingerprintMismatch: the rail saw the key with different parameters
	// (Stripe idempotency_error, Razorpay "Different request with the same
	// idempotency key"): a bug on our side; quarantine, never rotate the key.
	FingerprintMismatch
	// Rejected: a definite rejection (400/402/404, 429, 401): not applied.
	Rejected
	// Ambiguous: 5xx, timeout, reset, lost response: reconcile before retry.
	Ambiguous
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case InProgress:
		return "in_progress"
	case FingerprintMismatch:
		return "fingerprint_mismatch"
	case Rejected:
		return "rejected"
	case Ambiguous:
		return "ambiguous"
	}
	return "unclassified"
}

// Response is the rail's answer, or the transport error that replaced it.
type Response struct {
	Status  int // 0 when there was no HTTP response
	Headers map[string]string
	Body    []byte
	// TransportErr is set when no response arrived (timeout, reset, lost).
	TransportErr error
}

// Classification is Classify's verdict on a response.
type Classification struct {
	Outcome Outcome
	// EntityID of the created refund/payout/transfer (Applied only).
	EntityID string
	// FeeMinor is the fee the rail reports for the entity, 0 if none.
	FeeMinor int64
	// Reason is a short human sentence (the rail's own error message when
	// there is one).
	Reason string
	// Stamp is the countersign_sik value the created entity carries in its
	// metadata/notes (Applied only; "" when it carries none). A 2xx whose
	// entity carries another stamp is not this request's entity: see
	// [Classification.CheckStamp].
	Stamp string
	// CallID is the id of the JSON-RPC response the outcome was read from,
	// as JSON text ("null" when it named none), for an answer a server
	// routes by id (MCP); "" when the outcome was not read from such a
	// response (a transport error, an HTTP status the exchange itself
	// carries). See [Classification.CheckCall].
	CallID string
}

// CheckCall returns c unchanged unless c was read from a JSON-RPC response
// (CallID set) that names another id than sent, the id the call left with
// (rail.Stamped.CallID); then the answer is some other request's (a
// server that routes answers by id hands one request's answer to another
// that shares its id) and proves nothing about this call: c becomes
// Ambiguous, to be settled by Find. sent "" checks nothing (the call left
// with no id of Countersign's).
func (c Classification) CheckCall(sent string) Classification {
	if sent == "" || c.CallID == "" || c.Outcome == Ambiguous {
		return c
	}
	if want, err := json.Marshal(sent); err == nil && c.CallID == string(want) {
		return c
	}
	// The id is not quoted: it may be one an agent chose for another
	// request, and the reason is shown to every agent sending this one.
	return Classification{
		Outcome: Ambiguous,
		Reason:  "the MCP server's answer (" + c.Outcome.String() + ") names another JSON-RPC id than " + sent + ", the one the call left with: another request's answer, which proves nothing about this call",
	}
}

// CheckStamp returns c unchanged unless c is Applied and the entity's stamp
// differs from sent, the body stamp the request carried; then the answer is
// some other entity (a replayed or misrouted body) and c becomes Ambiguous,
// to be settled by Find. Call it only when the request body was stamped.
func (c Classification) CheckStamp(sent string) Classification {
	if c.Outcome != Applied || c.Stamp == sent {
		return c
	}
	return Classification{
		Outcome: Ambiguous,
		Reason:  "the rail answered 2xx with entity " + c.EntityID + " stamped " + quoteOrNone(c.Stamp) + ", not " + quoteOrNone(sent) + ": not this request's entity",
	}
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(no stamp)"
	}
	return `"` + s + `"`
}

// Entity is one refund/payout/transfer as listed by the rail.
type Entity struct {
	ID          string
	Stamp       string // the countersign_sik value in metadata/notes, "" if none
	AmountMinor int64
	Currency    string
	Status      string
	Created     time.Time
	// Raw is the entity's JSON as the rail listed it.
	Raw []byte
	// Unlike, on a Finding's Match, says how the entity differs from the
	// action Find searched for — another amount, currency, payment or
	// destination, as the adapter's answer check reads them — and is ""
	// when it is that action. A stamped entity unlike its action is not
	// the action applied: the rail read the request otherwise.
	Unlike string
}

// Finding is the result of searching the rail for an intent's stamp.
type Finding struct {
	// Match is the entity carrying the stamp, nil if none was found.
	Match *Entity
	// Exhausted is true only when every page was read to the end (the
	// rail said there is no more). Absence is proven only when Match is nil
	// and Exhausted is true.
	Exhausted bool
	// Pages is how many list pages were read.
	Pages int
}

// Stamped is what Stamp produces for an allowed request.
type Stamped struct {
	// Headers to set on the outbound request (the idempotency key).
	Headers map[string]string
	// BodyField and BodyValue name the body stamp (Stripe
	// metadata[countersign_sik], Razorpay notes.countersign_sik) for ext_proc.
	BodyField string
	BodyValue string
	// AmountField names the body member an action without an amount (a
	// full refund) leaves with its valued amount in, written by ext_proc as
	// an integer in minor units in the body's media type (that of
	// BodyField; with none, a dotted path is JSON's): the rail then moves
	// what the gates valued and the ledger holds, not whatever is
	// refundable when the request arrives. "" when the action has an
	// amount or the call has no member for one.
	AmountField string
	// CallID is the JSON-RPC id a call leaves with in place of the agent's
	// (MCP; "" elsewhere): a string no agent's request may carry (the
	// adapter refuses it), so a server routing answers by id can hand this
	// call no other request's answer, and an answer naming another id is
	// not this call's ([Classification.CheckCall]). It is minted per stamp;
	// the engine makes it the attempt's by appending "#" and the attempt's
	// number. ext_proc writes it and gives the agent its own id back.
	CallID string
}

// BodyMediaType is the media type of a body stamped at field, spelled as
// the rails read it: a form for a bracketed field (Stripe's metadata[…]),
// JSON for a dotted one (Razorpay's notes.…, an MCP tool's argument); ""
// for no field. An allowed request leaves with it, whatever Content-Type
// the agent sent: a rail that reads a JSON body only under an exact
// "application/json" reads none under "application/JSON" (or none at all),
// and a Razorpay refund without parameters refunds the payment whole.
func BodyMediaType(field string) string {
	switch {
	case field == "":
		return ""
	case strings.Contains(field, "["):
		return "application/x-www-form-urlencoded"
	}
	return "application/json"
}

// Client performs read-only calls to the rail with the rail's secret key.
// The engine supplies it; adapters never hold keys.
type Client interface {
	// Do sends req to the rail (method, path with query, headers, body) and
	// returns the answer. The adapter builds rail-relative paths; the
	// client adds the base URL and the Authorization header.
	Do(ctx context.Context, method, path string, headers map[string]string, body []byte) (*http.Response, error)
}

// Errors adapters return.
var (
	// ErrUnrecognised: the request is on the rail's host but is not a call
	// the adapter knows. The engine blocks it (F1).
	ErrUnrecognised = errors.New("rail: request not recognised")
	// ErrMalformed: the request is recognised but its body or parameters
	// cannot be parsed (a float or string amount, bad JSON, a bad form).
	ErrMalformed = errors.New("rail: malformed request")
	// ErrReferent: the referent could not be resolved (unknown payment,
	// currency mismatch, rail error on the read).
	ErrReferent = errors.New("rail: referent not resolved")
)

// Adapter is one rail's knowledge. Implementations are stateless and safe
// for concurrent use.
type Adapter interface {
	// Rail names the rail (sik.RailStripe, sik.RailRazorpay).
	Rail() sik.Rail
	// Parse recognises req. It returns ErrUnrecognised for an unknown
	// method/path and ErrMalformed (wrapped with the field's name) for a
	// body it cannot read. It never panics on any input.
	Parse(req Request) (Parsed, error)
	// Resolve reads the action's referent from the rail (read-only).
	Resolve(ctx context.Context, c Client, a Action) (Referent, error)
	// Stamp returns the idempotency header and body stamp for the SIK at
	// stamp generation gen, within the rail's key rules.
	Stamp(a Action, key sik.SIK, gen uint32) (Stamped, error)
	// Classify reads the rail's answer to a stamped request.
	Classify(a Action, resp Response) Classification
	// Find lists the rail's entities for the action's subject, paging to
	// exhaustion (and de-duplicating across offset pages), and returns the
	// one whose stamp equals stamp. Before it reports absence it reads the
	// account's entities of the kind too, whatever their subject (a rail
	// that read the request otherwise may have made it for another payment
	// or destination: that entity is the match, its Unlike set), unless
	// the subject's listing already was the account's, or the rail reads
	// the subject from the request's path (a Razorpay refund). since bounds listing
	// by creation time where the rail needs it (payouts, the account's
	// listing); it is a lower bound with slack, never a reason to stop
	// early.
	Find(ctx context.Context, c Client, a Action, stamp string, since time.Time) (Finding, error)
	// Refusal shapes a refusal like the rail's own error body.
	Refusal(status int, code, message string) []byte
}

// RequestRefuser is implemented by adapters whose refusal depends on the
// request (an MCP JSON-RPC answer must carry the request's id, and goes out
// as HTTP 200 so the client delivers it as the tool call's error). The
// engine prefers it to Refusal.
type RequestRefuser interface {
	RefuseRequest(req Request, status int, code, message string) (httpStatus int, body []byte)
}

// ToolDescriber is implemented by adapters that reach the rail through an
// MCP server. DescribeTool reads, from the server itself with the key
// Countersign holds (never from the agent), the server's current tools
// list, once (every page), and returns the pin hashes of tool and of the
// list (see mcp.DescriptionHash, mcp.EntryHash, mcp.ListHash). Any failure
// of the read — the server unreachable, slow, answering an error, an
// oversized or malformed list, or not listing the tool — is an error: the
// caller must fail closed.
type ToolDescriber interface {
	DescribeTool(ctx context.Context, c Client, tool string) (ToolHashes, error)
}

// ToolHashes are the pin hashes of one tools/list read, the facts G6
// compares with a mandate's MCP pins. Description is always set on
// success. Entry is "" when the tool's entry has no RFC 8785 canonical
// form, and List is "" when some entry has none (or the list is too large
// in canonical form): a mandate that pins them then refuses the call,
// while one that pins only descriptions is judged as before.
type ToolHashes struct {
	Description string
	Entry       string
	List        string
}

// ListedAnswerer is implemented by adapters whose answer to a call is not
// the rail's entity itself (an MCP server's JSON-RPC message): ListedAnswer is
// the answer to the call that created e, built from the entity as the rail
// lists it, so that it classifies, is stored and is replayed like the
// server's own.
type ListedAnswerer interface {
	ListedAnswer(e Entity) (Response, error)
}

// Reverser is implemented by adapters that know which of their actions the
// rail can still reverse once applied (a Stripe standard payout, which can
// be cancelled only while it is pending; not a transfer, whose reversal
// depends on the destination's balance at that later time). A mandate
// grant marked reversible permits only those. An adapter without it has
// none.
type Reverser interface {
	Reversible(a Action) bool
}

// Replayer is implemented by adapters whose stored answer must be re-shaped
// for a duplicate request (an MCP response carries the new call's id).
type Replayer interface {
	Replay(req Request, stored Response) ([]byte, error)
}

// UnlikeListed is how a listed entity raw differs from the action a the
// reconciler searched it for, as the adapter's answer check reads them (T
// is its reading of a created entity: its Matches is the check of the
// rail's answer to the request); "" when it does not. It fills
// Entity.Unlike.
func UnlikeListed[T interface {
	Matches(a Action, want string) error
}](raw []byte, a Action, want string) string {
	var c T
	if err := json.Unmarshal(raw, &c); err != nil {
		return err.Error()
	}
	if err := c.Matches(a, want); err != nil {
		return err.Error()
	}
	return ""
}
