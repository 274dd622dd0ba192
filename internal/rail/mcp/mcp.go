// Package mcp is the rail.Adapter for a payment MCP server reached over
// MCP's streamable HTTP transport: JSON-RPC 2.0 messages POSTed to one
// endpoint, answered with application/json or a text/event-stream.
//
// A money-moving MCP tool is a rail action in another envelope. The
// adapter maps configured tool names and argument names to a rail.Action
// (refund, payout, transfer) and composes the underlying rail's adapter
// (stripe.New(), razorpay.New()) for everything that happens at the rail's
// own REST API: Resolve reads the referent, Find lists entities by stamp,
// Stamp names the idempotency header, and Classify reads the created
// entity the tool returns. Rail() is the underlying rail, so an MCP refund
// and a REST refund of the same payment on one rail account have one SIK.
//
// Fail closed: a tool that is neither configured as money-moving nor listed
// as read-only is not recognised; an argument a money-moving tool does not
// declare is malformed (it might change what the tool does); a JSON-RPC
// batch, a task-augmented call, and a key sent twice anywhere (including
// keys that differ only in case, which Go servers read as one) are
// malformed.
//
// Stamps: the underlying rail's idempotency header is set, but an MCP
// server makes its own rail call and usually does not forward it. Where
// the tool takes a key→value argument (Stripe metadata, Razorpay notes)
// the stamp is written there, at params.arguments.<argument>.countersign_sik,
// and comes back in the rail's listings; the reconciler matches only on
// that stamp. A tool without such an argument gets no body stamp, so an
// ambiguous outcome of it can never be proven absent: see docs/mcp.md.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// Config maps an MCP server's tools to rail actions.
type Config struct {
	// Rail is the rail the MCP server moves money on; Underlying.Rail()
	// must equal it.
	Rail sik.Rail
	// Endpoint is the streamable HTTP path (e.g. "/mcp"), matched exactly.
	Endpoint string
	// Tools maps each money-moving tool name to its action.
	Tools map[string]Tool
	// ReadOnlyTools are tools that cannot move money out; calling one is a
	// read. A tool that writes without paying out (create_customer,
	// create_payment_link) belongs here only by the owner's explicit
	// choice; a tool that can rewrite notes or metadata of a refund or
	// payout (Razorpay update_refund) must never be listed, as it could
	// erase the stamp the reconciler searches for.
	ReadOnlyTools []string
	// Underlying is the rail's own adapter (stripe.New(), razorpay.New()):
	// it resolves referents and lists entities at the rail's REST API, and
	// names the idempotency header.
	Underlying rail.Adapter
}

// Tool describes one money-moving tool by its argument names.
type Tool struct {
	// Kind of money movement the tool makes.
	Kind sik.Kind
	// Subject is the argument naming the rail entity the action is about:
	// the payment for a refund, the destination for a payout or transfer.
	Subject string
	// Amount is the argument carrying the amount as a JSON integer in
	// minor units; "" when the tool takes none (a refund is then full, and
	// refused: Countersign writes a full refund's valued amount into the
	// call, and could not bound what such a tool refunds). A call omitting
	// it is a full refund, which needs the kind's tools to name it alike.
	Amount string
	// AmountRequired refuses a call without the amount. Set it when the
	// server does not leave an omitted amount out of its rail call (the
	// Razorpay server sends amount 0), so "omitted" would not mean "full".
	// Payouts and transfers always require it.
	AmountRequired bool
	// Currency is the argument carrying an ISO 4217 code; "" when none.
	// Payouts and transfers must have one.
	Currency string
	// Metadata is the argument that takes key→value pairs stored on the
	// created entity (Stripe metadata, Razorpay notes), where the stamp is
	// written; "" when the tool has none.
	Metadata string
	// Extra are arguments that change the meaning of the action; their
	// values (as strings) take part in the SIK under the argument's name.
	Extra []string
	// Defaults are Extra values assumed when the argument is omitted, so
	// that omitted and explicit default are one action (Razorpay speed
	// "normal").
	Defaults map[string]string
	// Values are, per Extra argument, the only values it may take, as
	// rendered in the key (Razorpay speed: "normal", "optimum"). An Extra
	// without an entry takes any string, boolean or integer: then two
	// values a lenient server reads alike ("normal", "Normal") are two
	// actions to Countersign, and an agent could repeat one under the other
	// without a distinct reason; and its value (but a boolean or the
	// default) is free text too, which the mandate's free_text refuses or
	// holds. List them for every Extra you can.
	Values map[string][]string
	// Ignored are arguments accepted that change nothing about the money
	// (Razorpay receipt). Any argument not named in this Tool is refused.
	Ignored []string
}

// maxMetadataKeys is each rail's limit on metadata/notes keys.
var maxMetadataKeys = map[sik.Rail]int{sik.RailStripe: 50, sik.RailRazorpay: 15}

// ArgumentsPath is the JSON-RPC path of a tools/call's arguments.
const ArgumentsPath = "params.arguments"

type adapter struct {
	rail       sik.Rail
	endpoint   string
	tools      map[string]Tool
	readOnly   map[string]bool
	under      rail.Adapter
	metadataOf map[sik.Kind]string // the stamped argument per kind, "" if none
	// amountOf is the amount argument per kind when every tool of the kind
	// that may omit it names it alike, "" otherwise: where a full refund's
	// valued amount is written.
	amountOf map[sik.Kind]string
}

// New checks cfg and returns the adapter. It is stateless and safe for
// concurrent use.
func New(cfg Config) (rail.Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ad := &adapter{
		rail: cfg.Rail, endpoint: cfg.Endpoint, tools: maps.Clone(cfg.Tools),
		readOnly: map[string]bool{}, under: cfg.Underlying, metadataOf: map[sik.Kind]string{}, amountOf: map[sik.Kind]string{},
	}
	for _, name := range cfg.ReadOnlyTools {
		ad.readOnly[name] = true
	}
	conflict := map[sik.Kind]bool{}
	for _, t := range cfg.Tools {
		ad.metadataOf[t.Kind] = t.Metadata
		if t.AmountRequired {
			continue // never called without an amount
		}
		// Stamp sees the action, not the tool: tools naming the amount
		// differently leave it no one place.
		if a, seen := ad.amountOf[t.Kind]; seen && a != t.Amount {
			conflict[t.Kind] = true
		}
		ad.amountOf[t.Kind] = t.Amount
	}
	for k := range conflict {
		ad.amountOf[k] = ""
	}
	return ad, nil
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("mcp: "+format, args...)) }
	if _, ok := maxMetadataKeys[c.Rail]; !ok {
		bad("rail %q: want %q or %q", c.Rail, sik.RailStripe, sik.RailRazorpay)
	}
	if c.Underlying == nil {
		bad("underlying adapter is required (it reads the rail's REST API)")
	} else if c.Underlying.Rail() != c.Rail {
		bad("underlying adapter is for %q, not %q", c.Underlying.Rail(), c.Rail)
	}
	if !cleanPath(c.Endpoint) {
		bad("endpoint %q must be a clean absolute path without query (e.g. /mcp)", c.Endpoint)
	}
	if len(c.Tools) == 0 {
		bad("no money-moving tools configured")
	}
	stampedBy := map[sik.Kind]string{} // kind → tool whose Metadata the kind uses
	for _, name := range slices.Sorted(maps.Keys(c.Tools)) {
		t := c.Tools[name]
		for _, err := range t.validate(name) {
			bad("%v", err)
		}
		if other, ok := stampedBy[t.Kind]; ok && c.Tools[other].Metadata != t.Metadata {
			// Stamp sees only the action, not the tool: one kind, one place.
			bad("tools %q and %q both make a %s but stamp different arguments (%q, %q)", other, name, t.Kind, c.Tools[other].Metadata, t.Metadata)
		}
		stampedBy[t.Kind] = name
	}
	seen := map[string]bool{}
	for _, name := range c.ReadOnlyTools {
		switch {
		case name == "":
			bad("read-only tool with an empty name")
		case seen[name]:
			bad("read-only tool %q listed twice", name)
		}
		if _, ok := c.Tools[name]; ok {
			bad("tool %q is both money-moving and read-only", name)
		}
		seen[name] = true
	}
	return errors.Join(errs...)
}

func (t Tool) validate(name string) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("tool %q: "+format, append([]any{name}, args...)...))
	}
	if name == "" {
		bad("empty tool name")
	}
	switch t.Kind {
	case sik.KindRefund, sik.KindPayout, sik.KindTransfer:
	default:
		bad("kind %q: want refund, payout or transfer", t.Kind)
	}
	if t.Subject == "" {
		bad("subject argument is required")
	}
	if t.Kind != sik.KindRefund && (t.Amount == "" || t.Currency == "") {
		bad("a %s needs amount and currency arguments", t.Kind)
	}
	if t.AmountRequired && t.Amount == "" {
		bad("amount is required but no amount argument is named")
	}
	roles := map[string]string{}
	claim := func(role, arg string) {
		if arg == "" {
			return
		}
		if strings.Contains(arg, ".") {
			bad("argument %q (%s): a dot cannot appear in a stamped JSON path", arg, role)
		}
		if prev, dup := roles[arg]; dup {
			bad("argument %q is both %s and %s", arg, prev, role)
		}
		roles[arg] = role
	}
	claim("subject", t.Subject)
	claim("amount", t.Amount)
	claim("currency", t.Currency)
	claim("metadata", t.Metadata)
	for _, e := range t.Extra {
		if e == "" || e == "amount" || strings.HasPrefix(e, "countersign") {
			bad("extra argument %q: the SIK reserves it", e)
		}
		claim("extra", e)
	}
	for _, i := range t.Ignored {
		claim("ignored", i)
	}
	for k, d := range t.Defaults {
		if roles[k] != "extra" {
			bad("default for %q, which is not an extra argument", k)
		}
		if vs, ok := t.Values[k]; ok && !slices.Contains(vs, d) {
			bad("default %q for %q is not one of its values %q", d, k, vs)
		}
	}
	for k, vs := range t.Values {
		if roles[k] != "extra" {
			bad("values for %q, which is not an extra argument", k)
		}
		if len(vs) == 0 {
			bad("values for %q: none listed", k)
		}
	}
	return errs
}

// cleanPath: "/" or "/seg/seg" of non-empty segments without dot segments,
// percent-escapes or query, so it means the same here and at the server.
func cleanPath(p string) bool {
	if p == "/" {
		return true
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsAny(p, "?#%\\ ") {
		return false
	}
	for _, s := range strings.Split(p[1:], "/") {
		if s == "" || s == "." || s == ".." {
			return false
		}
	}
	return true
}

// Rail implements rail.Adapter: the underlying rail.
func (ad *adapter) Rail() sik.Rail { return ad.rail }

// Resolve implements rail.Adapter by the underlying adapter: the referent
// lives at the rail's REST API, read with the rail key.
func (ad *adapter) Resolve(ctx context.Context, c rail.Client, a rail.Action) (rail.Referent, error) {
	return ad.under.Resolve(ctx, c, a)
}

// Find implements rail.Adapter by the underlying adapter: an MCP server's
// refund is a refund at the rail, listed and matched on its stamp.
func (ad *adapter) Find(ctx context.Context, c rail.Client, a rail.Action, stamp string, since time.Time) (rail.Finding, error) {
	return ad.under.Find(ctx, c, a, stamp, since)
}

// Stamp implements rail.Adapter: the underlying rail's idempotency header
// (the MCP server may not forward it), and the body stamp in the tool's
// metadata argument when the kind's tools have one, else no body field; a
// full refund's amount goes in the tools' amount argument when they name
// one alike.
func (ad *adapter) Stamp(a rail.Action, key sik.SIK, gen uint32) (rail.Stamped, error) {
	md, ok := ad.metadataOf[a.Kind]
	if !ok {
		return rail.Stamped{}, fmt.Errorf("mcp: stamp: no tool makes a %q", a.Kind)
	}
	st, err := ad.under.Stamp(a, key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("mcp: stamp: %w", err)
	}
	value, err := sik.Stamp(key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("mcp: stamp: %w", err)
	}
	// Only the idempotency header: the rail adapter's pins (Stripe-Version)
	// are for the rail's REST API, not for the MCP server.
	name, _, err := sik.HeaderStamp(ad.under.Rail(), a.Kind, key, gen)
	if err != nil {
		return rail.Stamped{}, fmt.Errorf("mcp: stamp: %w", err)
	}
	out := rail.Stamped{Headers: map[string]string{name: st.Headers[name]}, BodyValue: value, CallID: CallIDPrefix + value}
	if md != "" {
		out.BodyField = BodyField(md)
	}
	if amt := ad.amountOf[a.Kind]; amt != "" && a.AmountMinor == nil {
		out.AmountField = ArgumentsPath + "." + amt
	}
	return out, nil
}

// CallIDPrefix begins the JSON-RPC id a money-moving call leaves with
// (rail.Stamped.CallID: the prefix, the stamp, then "#" and the attempt's
// number). Parse refuses every id an agent sends that begins, in any case,
// with "countersign", so a server that routes answers by id (the MCP SDKs'
// streamable HTTP transports do, within a session) has no other request to
// confuse the call with.
const CallIDPrefix = "countersign-"

// reservedID reports whether raw is a string id of Countersign's own
// (beginning with "countersign" in any case), which no agent may send.
func reservedID(raw json.RawMessage) bool {
	s, ok := asString(raw)
	return ok && len(s) >= len(reservedIDPrefix) && strings.EqualFold(s[:len(reservedIDPrefix)], reservedIDPrefix)
}

const reservedIDPrefix = "countersign"

// BodyField is the JSON-RPC path of the stamp in a tool's metadata
// argument: params.arguments.<metadata>.countersign_sik. It has four
// levels; extproc.StampBody writes two ([WriteBodyStamp] writes any).
func BodyField(metadataArg string) string {
	return ArgumentsPath + "." + metadataArg + "." + sik.StampKey
}

// RefusalCode is the JSON-RPC error code of a Countersign refusal, in the
// range JSON-RPC reserves for implementation-defined server errors.
const RefusalCode = -32001

// Refusal implements rail.Adapter with a JSON-RPC error whose id is null:
// the signature carries no request. MCP's streamable HTTP transport allows
// an error without id in an HTTP error status answer; see [RefusalFor] for
// the answer that names the request.
func (ad *adapter) Refusal(_ int, code, message string) []byte {
	return RefusalFor(nil, code, message)
}

// RefusalFor is the JSON-RPC error answering the request whose id is id
// (nil or invalid: null):
//
//	{"jsonrpc":"2.0","id":…,"error":{"code":-32001,"message":…,"data":{"reason_code":…},"reason_code":…}}
//
// data.reason_code is the documented place of the reason code; the copy
// beside message exists for readers that look only at the error object's
// own members (the rail conformance suite among them).
func RefusalFor(id json.RawMessage, code, message string) []byte {
	if !validID(id) {
		id = json.RawMessage("null")
	}
	type data struct {
		ReasonCode string `json:"reason_code"`
	}
	var body struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code       int    `json:"code"`
			Message    string `json:"message"`
			Data       data   `json:"data"`
			ReasonCode string `json:"reason_code"`
		} `json:"error"`
	}
	body.JSONRPC, body.ID = "2.0", id
	body.Error.Code, body.Error.Message = RefusalCode, message
	body.Error.Data.ReasonCode, body.Error.ReasonCode = code, code
	out, err := json.Marshal(body)
	if err != nil { // unreachable: strings and a checked id
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"refused"}}`)
	}
	return out
}

// RequestID returns the id of the JSON-RPC request in body, nil when body
// is not one request with a string or integer id (a notification, a batch,
// garbage). The engine can keep it to answer with [RefusalFor].
func RequestID(body []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if checkJSON(body) != nil || json.Unmarshal(body, &m) != nil {
		return nil
	}
	id, ok := m["id"]
	if !ok || !validID(id) {
		return nil
	}
	return append(json.RawMessage(nil), id...)
}

// RefuseRequest implements rail.RequestRefuser: the refusal is a JSON-RPC
// error for the call's own id, sent as HTTP 200 so that the MCP client
// hands it to the agent as the tool call's error.
func (ad *adapter) RefuseRequest(req rail.Request, _ int, code, message string) (int, []byte) {
	return http.StatusOK, RefusalFor(RequestID(req.Body), code, message)
}

// Replay implements rail.Replayer: the stored answer of the applied call,
// re-addressed to the duplicate call's id.
// ListedAnswer implements rail.ListedAnswerer: a JSON-RPC result whose one
// text item is the entity as the underlying rail lists it, the shape of
// the shipped servers' answers (its id is replaced for each duplicate).
func (ad *adapter) ListedAnswer(e rail.Entity) (rail.Response, error) {
	if !json.Valid(e.Raw) {
		return rail.Response{}, fmt.Errorf("mcp: the listed entity %s is not JSON", e.ID)
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 0,
		"result": map[string]any{"content": []map[string]string{{"type": "text", "text": string(e.Raw)}}}})
	if err != nil {
		return rail.Response{}, err
	}
	return rail.Response{Status: http.StatusOK, Headers: map[string]string{"content-type": "application/json"}, Body: body}, nil
}

func (ad *adapter) Replay(req rail.Request, stored rail.Response) ([]byte, error) {
	return ReplayFor(RequestID(req.Body), stored)
}
