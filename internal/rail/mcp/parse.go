package mcp

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// Request headers Parse reads (rail.Request headers are lower-case).
const (
	headerDistinct    = "x-countersign-distinct"
	headerContentType = "content-type"
)

// readMethods are the MCP requests that move no money: lifecycle,
// discovery, resources, prompts, completion, logging. tools/call is read
// per tool; tasks/* is not recognised (Countersign refuses task-augmented
// calls, so it has no tasks to read).
var readMethods = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"prompts/list": true, "prompts/get": true,
	"completion/complete": true, "logging/setLevel": true,
}

// messageKeys are the members of a JSON-RPC 2.0 message.
var messageKeys = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// callKeys are the members of tools/call params Countersign understands.
// "task" (MCP task augmentation) is refused: the server would answer with
// a task handle before the tool ran, and Countersign must see the result.
var callKeys = []string{"name", "arguments", "_meta"}

// Parse implements rail.Adapter. The endpoint takes POSTed JSON-RPC
// messages and GET (the server's SSE stream); anything else is not
// recognised, DELETE (session end) included.
func (ad *adapter) Parse(req rail.Request) (rail.Parsed, error) {
	path, query, _ := strings.Cut(req.Path, "?")
	if path != ad.endpoint {
		return rail.Parsed{}, unrecognised(req)
	}
	if err := headers.Check(req.Headers); err != nil {
		return rail.Parsed{}, err
	}
	switch req.Method {
	case http.MethodGet:
		if len(req.Body) > 0 {
			// A server that read it would read what Countersign did not.
			return rail.Parsed{}, malformed("body", "a GET carries no body")
		}
		return rail.Parsed{Kind: rail.KindRead}, nil
	case http.MethodPost:
	default:
		return rail.Parsed{}, unrecognised(req)
	}
	msg, err := decodeMessage(req)
	if err != nil {
		return rail.Parsed{}, err
	}
	if err := checkReservedIDs(msg); err != nil {
		return rail.Parsed{}, err
	}
	method, hasMethod := msg["method"]
	if !hasMethod {
		return ad.parseResponse(msg)
	}
	name, ok := asString(method)
	if !ok {
		return rail.Parsed{}, malformed("method", "%.40s is not a string", method)
	}
	id, hasID := msg["id"]
	if _, ok := msg["result"]; ok {
		return rail.Parsed{}, malformed("result", "a request carries no result")
	}
	if _, ok := msg["error"]; ok {
		return rail.Parsed{}, malformed("error", "a request carries no error")
	}
	if strings.HasPrefix(name, "notifications/") {
		if hasID {
			return rail.Parsed{}, malformed("id", "notification %s carries an id", name)
		}
		return rail.Parsed{Kind: rail.KindRead}, nil
	}
	if !hasID || !validID(id) {
		// Without an id a request is a notification, and some servers
		// would still run it: refuse rather than guess.
		return rail.Parsed{}, malformed("id", "request %s needs a string or integer id", name)
	}
	switch {
	case name == "tools/call":
		return ad.parseCall(msg, query, req)
	case readMethods[name]:
		return rail.Parsed{Kind: rail.KindRead}, nil
	}
	return rail.Parsed{}, fmt.Errorf("%w: MCP method %q is not one Countersign knows", rail.ErrUnrecognised, name)
}

// headers are the rules every rail shares (rail.HeaderPolicy: the
// method-override family and a compressed body are refused whatever the
// method), and the rails' own: an MCP server may pass a Stripe-Account,
// Stripe-Context or X-Razorpay-Account header on to the rail, which would
// then act on an account Countersign does not guard (and reads nothing
// of), so they are refused, as is every other header of the rails' names.
// MCP names no headers of its own that change what a tool does.
var headers = rail.HeaderPolicy{
	Rules: map[string]rail.HeaderRule{
		"stripe-account":     {Class: rail.HeaderRefused, Why: "an MCP server may pass it to Stripe, to act on a connected account, which Countersign does not guard"},
		"stripe-context":     {Class: rail.HeaderRefused, Why: "an MCP server may pass it to Stripe, to act in another account's context, which Countersign does not guard"},
		"x-razorpay-account": {Class: rail.HeaderRefused, Why: "an MCP server may pass it to Razorpay, to act on another merchant's account, which Countersign does not guard"},
	},
	Namespaces: []string{"stripe-", "x-stripe-", "x-razorpay-"},
}

func unrecognised(req rail.Request) error {
	return fmt.Errorf("%w: mcp %s %q", rail.ErrUnrecognised, req.Method, req.Path)
}

// decodeMessage reads the body as one JSON-RPC 2.0 message object.
func decodeMessage(req rail.Request) (object, error) {
	// Only UTF-8: a server that decodes the body in the charset it names
	// (the TypeScript SDK does, through iconv) would read, in UTF-7, JSON
	// that Countersign reads as the inside of a string.
	if err := rail.CheckMediaType(req.Headers[headerContentType], "application/json"); err != nil {
		return nil, malformed("content-type", "%v; MCP messages are POSTed as application/json", err)
	}
	body := rail.TrimJSONSpace(req.Body)
	if len(body) == 0 {
		return nil, malformed("body", "empty; a JSON-RPC message is required")
	}
	if err := checkJSON(body); err != nil {
		return nil, err
	}
	if body[0] == '[' {
		// MCP dropped batching; a batch could hide a tools/call among
		// reads, and its parts would need separate answers.
		return nil, malformed("body", "a JSON-RPC batch; send one message per request")
	}
	msg, ok := asObject(body)
	if !ok {
		return nil, malformed("body", "must be a JSON-RPC message object")
	}
	for k := range msg {
		if !slices.Contains(messageKeys, k) {
			return nil, malformed(k, "not a member of a JSON-RPC message")
		}
	}
	if v, _ := asString(msg["jsonrpc"]); v != "2.0" {
		return nil, malformed("jsonrpc", `must be "2.0"`)
	}
	return msg, nil
}

// checkReservedIDs refuses a message naming one of the ids Countersign
// gives money-moving calls (CallIDPrefix): as its own id (a request sent
// beside the call under the call's id would have its answer handed to the
// call, or the call's to it), or as the request a cancellation names
// (notifications/cancelled would stop the call at the server).
func checkReservedIDs(msg object) error {
	if reservedID(msg["id"]) {
		return malformed("id", "ids beginning %q are Countersign's own", reservedIDPrefix)
	}
	params, _ := asObject(msg["params"])
	for k, v := range params {
		// By any case: a Go server matches "RequestId" to its requestId
		// field (found by a review).
		if strings.EqualFold(k, "requestId") && reservedID(v) {
			return malformed("params."+k, "ids beginning %q are Countersign's own", reservedIDPrefix)
		}
	}
	return nil
}

// parseResponse accepts the client's answer to a server request. On an
// account with money-moving tools it accepts only answers that carry
// nothing a tool could act on (checkClientResult, checkClientError): a tool awaiting an
// elicitation or a sampling result would act on values no gate saw.
func (ad *adapter) parseResponse(msg object) (rail.Parsed, error) {
	result, hasResult := msg["result"]
	errObj, hasError := msg["error"]
	switch {
	case !validID(msg["id"]):
		return rail.Parsed{}, malformed("id", "a response needs the string or integer id of the request it answers")
	case hasResult == hasError:
		return rail.Parsed{}, malformed("result", "a response carries exactly one of result and error")
	case msg["params"] != nil:
		return rail.Parsed{}, malformed("params", "a response carries no params")
	}
	if len(ad.tools) > 0 {
		if !plainID(msg["id"]) {
			// The servers' SDKs number their requests 0, 1, 2, …: any other
			// id is text the agent chose, sent to the server beside the
			// answer.
			return rail.Parsed{}, malformed("id", "an answer's id must be an integer of at most %d digits (or a string of them), as the MCP SDKs number a server's requests, on an account with money-moving tools: %s", maxPlainID, whyAnswer)
		}
		var err error
		if hasError {
			err = checkClientError(errObj)
		} else {
			err = checkClientResult(result)
		}
		if err != nil {
			return rail.Parsed{}, err
		}
	}
	return rail.Parsed{Kind: rail.KindRead}, nil
}

// whyAnswer is why an answer to a server request is refused on an account
// with money-moving tools.
const whyAnswer = "a money-moving tool awaiting the answer could act on what it carries, which no gate judged; " +
	"a server must take such values as the tool's arguments"

// checkClientResult allows, by shape (Countersign does not track which
// request a response answers), the results that carry nothing but the
// client's refusal or its own workspace:
//   - {} (ping, or any empty result);
//   - {"roots": [...]} (roots/list; checkRoots);
//   - {"action": "decline"|"cancel"} with no content or an empty one
//     (elicitation/create declined or dismissed: no value is given).
//
// Everything else is refused: an accepted elicitation (even without
// content: it confirms what the server asked, a fee or another amount
// perhaps, which no gate saw), a sampling result (text a tool could take
// a destination or an amount from), and any other member. _meta is
// refused too: the SDKs hand a result's _meta, free-form, to the code
// that awaited the request, the tool included.
func checkClientResult(raw json.RawMessage) error {
	res, ok := asObject(raw)
	if !ok {
		return malformed("result", "must be an object")
	}
	if _, ok := res["_meta"]; ok {
		return malformed("result._meta", "a response's _meta is refused on an account with money-moving tools: %s", whyAnswer)
	}
	switch {
	case len(res) == 0:
		return nil
	case res["roots"] != nil:
		return checkRoots(res)
	case res["action"] != nil:
		return checkElicitResult(res)
	}
	k, _ := otherKey(res)
	return malformed("result."+k, "a result of this shape (a sampling result, or anything but {}, roots, or a declined or cancelled elicitation) is refused on an account with money-moving tools: %s", whyAnswer)
}

// checkElicitResult allows a declined or cancelled elicitation.
func checkElicitResult(res object) error {
	if k, ok := otherKey(res, "action", "content"); ok {
		return malformed("result."+k, "not a member of an elicitation result Countersign allows: %s", whyAnswer)
	}
	action, _ := asString(res["action"])
	if action != "decline" && action != "cancel" {
		return malformed("result.action", "%.40s: only a declined or cancelled elicitation is allowed on an account with money-moving tools (an accepted one gives or confirms values): %s", res["action"], whyAnswer)
	}
	if raw, ok := res["content"]; ok {
		if content, ok := asObject(raw); !ok || len(content) > 0 {
			return malformed("result.content", "a %s elicitation carries no content (or an empty object): %s", action, whyAnswer)
		}
	}
	return nil
}

// checkRoots allows a roots/list result as the 2025-06-18 schema has it:
// file:// URIs and optional names, nothing else, and only as short text
// (answerText): a tool that lists the client's roots is handed them, so
// they are held to what a workspace's roots look like, a few paths and
// names, with no room for a card number or a list of destinations.
func checkRoots(res object) error {
	if k, ok := otherKey(res, "roots"); ok {
		return malformed("result."+k, "not a member of a roots/list result: %s", whyAnswer)
	}
	roots, ok := asArray(res["roots"])
	if !ok {
		return malformed("result.roots", "must be an array")
	}
	if len(roots) > maxRoots {
		return malformed("result.roots", "%d roots; at most %d on an account with money-moving tools: %s", len(roots), maxRoots, whyAnswer)
	}
	var text answerText
	for i, raw := range roots {
		at := fmt.Sprintf("result.roots[%d]", i)
		root, ok := asObject(raw)
		if !ok {
			return malformed(at, "must be an object with a uri")
		}
		if k, ok := otherKey(root, "uri", "name"); ok {
			return malformed(at+"."+k, "not a member of a root Countersign allows (only uri and name): %s", whyAnswer)
		}
		uri, ok := asString(root["uri"])
		if !ok || len(uri) < len("file://") || !strings.EqualFold(uri[:len("file://")], "file://") {
			return malformed(at+".uri", "a root is a file:// URI")
		}
		if err := text.add(at+".uri", uri, maxRootURI); err != nil {
			return err
		}
		if raw, ok := root["name"]; ok {
			name, ok := asString(raw)
			if !ok {
				return malformed(at+".name", "must be a string")
			}
			if err := text.add(at+".name", name, maxAnswerText); err != nil {
				return err
			}
		}
	}
	return nil
}

// Bounds of the text a client's answer carries to the server's code that
// awaits it, on an account with money-moving tools (answerText).
const (
	// maxAnswerText bounds an error's message and a root's name, in bytes.
	// The SDKs' own refusals are shorter: "Method not found" (TypeScript,
	// Python), "MCP error -32601: Method not found", "Sampling not
	// supported", "Elicitation not supported", "List roots not supported"
	// (Python's defaults), "User rejected sampling request" (the spec's
	// example); 64 leaves room for those, not for a sentence of values.
	maxAnswerText = 64
	// maxRootURI bounds a root's URI, in bytes: a workspace path, well
	// within Windows' 260.
	maxRootURI = 255
	// maxRoots bounds a roots/list result: a client's workspace folders.
	maxRoots = 16
	// maxAnswerDigits bounds the digits of all of an answer's text
	// together: fewer than the 13 of the shortest card number, however it
	// is split.
	maxAnswerDigits = 12
)

// answerText checks an answer's text members: each printable ASCII within
// its bound, their digits together within maxAnswerDigits.
type answerText struct{ digits int }

func (t *answerText) add(member, s string, limit int) error {
	if len(s) > limit {
		return malformed(member, "%d bytes; at most %d on an account with money-moving tools: %s", len(s), limit, whyAnswer)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return malformed(member, "only printable ASCII on an account with money-moving tools (byte %d is 0x%02x): %s", i, c, whyAnswer)
		}
		if c >= '0' && c <= '9' {
			t.digits++
		}
	}
	if t.digits > maxAnswerDigits {
		return malformed(member, "the answer's text carries more than %d digits, room for a card number or an amount, on an account with money-moving tools: %s", maxAnswerDigits, whyAnswer)
	}
	return nil
}

// checkClientError allows a JSON-RPC error as a client declines a server
// request with: a code and a short message (answerText). data is refused: the SDKs hand it
// to the code that awaited the request, and it may be any JSON.
func checkClientError(raw json.RawMessage) error {
	e, ok := asObject(raw)
	if !ok {
		return malformed("error", "must be an object with a code and a message")
	}
	if k, ok := otherKey(e, "code", "message"); ok {
		return malformed("error."+k, "a client's error carries only code and message on an account with money-moving tools: %s", whyAnswer)
	}
	// The SDKs hand the code to the awaiting code too: JSON-RPC's own codes
	// (-32768 to -32000) and an application's small ones fit in six digits,
	// a card number or an amount does not (found by a review).
	code := string(rail.TrimJSONSpace(e["code"]))
	if !integerLiteral(code) || len(strings.TrimPrefix(code, "-")) > maxErrorCodeDigits {
		return malformed("error.code", "must be an integer of at most %d digits", maxErrorCodeDigits)
	}
	message, ok := asString(e["message"])
	if !ok {
		return malformed("error.message", "must be a string")
	}
	// The SDKs hand the message to the awaiting code as they do data: a
	// refusal's few words pass, a sentence of values does not. The code's
	// digits count with the message's: split between the two, a card
	// number does not fit either.
	var text answerText
	if err := text.add("error.code", strings.TrimPrefix(code, "-"), maxErrorCodeDigits); err != nil {
		return err
	}
	return text.add("error.message", message, maxAnswerText)
}

// maxErrorCodeDigits bounds a client's error code on an account with
// money-moving tools.
const maxErrorCodeDigits = 6

// asArray decodes raw as a JSON array.
func asArray(raw json.RawMessage) ([]json.RawMessage, bool) {
	if t := rail.TrimJSONSpace(raw); len(t) == 0 || t[0] != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return nil, false
	}
	return a, true
}

// otherKey names the first key of o, in sorted order, that is not one of
// allowed.
func otherKey(o object, allowed ...string) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(allowed, k) {
			return k, true
		}
	}
	return "", false
}

// parseCall recognises a tools/call.
func (ad *adapter) parseCall(msg object, query string, req rail.Request) (rail.Parsed, error) {
	params, ok := asObject(msg["params"])
	if !ok {
		return rail.Parsed{}, malformed("params", "tools/call needs params with the tool's name")
	}
	name, ok := asString(params["name"])
	if !ok || name == "" {
		return rail.Parsed{}, malformed("params.name", "tools/call needs the tool's name as a string")
	}
	// Only the members Countersign reads, on a read-only call as on a
	// money-moving one: a Go server matches "Arguments" (or "argumentſ")
	// to its arguments field, so arguments sent under such a name would
	// reach the tool unchecked (found by a review).
	for k := range params {
		if !slices.Contains(callKeys, k) {
			return rail.Parsed{}, malformed("params."+k, "not understood on a tools/call (task-augmented calls are refused: Countersign must see the tool's result)")
		}
	}
	if ad.readOnly[name] {
		if err := readArguments(params["arguments"]); err != nil {
			return rail.Parsed{}, err
		}
		return rail.Parsed{Kind: rail.KindRead}, nil
	}
	tool, ok := ad.tools[name]
	if !ok {
		return rail.Parsed{}, fmt.Errorf("%w: MCP tool %q is neither a configured money-moving tool nor read-only", rail.ErrUnrecognised, name)
	}
	if query != "" {
		return rail.Parsed{}, malformed("query", "a money-moving tools/call carries its arguments in the body only")
	}
	if !plainID(msg["id"]) {
		return rail.Parsed{}, malformed("id", "a money-moving tools/call's id must be an integer of at most %d digits (or a string of them): it reaches the server beside the arguments, seen by no gate", maxPlainID)
	}
	if raw, ok := params["_meta"]; ok {
		// Only a progress token: any other member is text the server
		// receives on a money-moving call that no gate values or reads
		// (a card number under free_text: refuse).
		meta, ok := asObject(raw)
		if !ok {
			return rail.Parsed{}, malformed("params._meta", "must be an object")
		}
		for k, v := range meta {
			if k != "progressToken" {
				return rail.Parsed{}, malformed("params._meta."+k, "not understood on a money-moving tools/call (only progressToken)")
			}
			if !plainID(v) {
				return rail.Parsed{}, malformed("params._meta.progressToken", "must be an integer of at most %d digits (or a string of them) on a money-moving call", maxPlainID)
			}
		}
	}
	args := object{}
	if raw, ok := params["arguments"]; ok {
		if args, ok = asObject(raw); !ok {
			return rail.Parsed{}, malformed(ArgumentsPath, "must be an object")
		}
	}
	a, err := ad.action(name, tool, args, req)
	if err != nil {
		return rail.Parsed{}, err
	}
	return rail.Parsed{Kind: rail.KindAction, Action: a, Tool: name}, nil
}

// action maps a money-moving tool's arguments to the action.
func (ad *adapter) action(name string, t Tool, args object, req rail.Request) (rail.Action, error) {
	field := func(arg string) string { return ArgumentsPath + "." + arg }
	for k := range args {
		if !t.declares(k) {
			return rail.Action{}, malformed(field(k), "tool %s takes no such argument here; Countersign refuses what it cannot value", name)
		}
	}
	distinct := req.Headers[headerDistinct]
	if err := sik.CheckDistinct(distinct); err != nil {
		return rail.Action{}, malformed(headerDistinct, "%s", err)
	}
	a := rail.Action{Kind: t.Kind, Distinct: distinct}

	raw, ok := args[t.Subject]
	if !ok {
		return rail.Action{}, malformed(field(t.Subject), "required: the %s's subject", t.Kind)
	}
	subject, ok := asString(raw)
	if !ok || !rail.IsID(subject) {
		return rail.Action{}, malformed(field(t.Subject), "%.60s is not a rail id", raw)
	}
	a.Subject = subject
	if t.Kind != sik.KindRefund {
		a.Payee = subject
	}

	if raw, ok := args[t.Amount]; ok && t.Amount != "" {
		n, err := minorUnits(raw)
		if err != nil {
			return rail.Action{}, malformed(field(t.Amount), "%v", err)
		}
		a.AmountMinor = &n
	} else if t.AmountRequired || t.Kind != sik.KindRefund {
		return rail.Action{}, malformed(field(t.Amount), "required")
	} else if ad.amountOf[t.Kind] == "" {
		// A full refund leaves for the amount it was valued at, written
		// into the call (Stamp's AmountField): with no one amount argument
		// to write it in, the server would refund whatever is refundable
		// when the call arrives, more than the hold if that grew.
		if t.Amount == "" {
			return rail.Action{}, malformed("params.name", "tool %q takes no amount, so Countersign cannot bound what it refunds (the whole refundable balance when the call arrives); map a tool that takes one", name)
		}
		return rail.Action{}, malformed(field(t.Amount), "required: this server's %s tools name their amount arguments differently, so Countersign has no one place to write a full refund's valued amount in; name the amount", t.Kind)
	}

	if raw, ok := args[t.Currency]; ok && t.Currency != "" {
		cur, ok := asString(raw)
		if !ok || !isCurrency(cur) {
			return rail.Action{}, malformed(field(t.Currency), "%.40s is not a three-letter ISO 4217 code", raw)
		}
		a.Currency = strings.ToUpper(cur)
	} else if t.Kind != sik.KindRefund {
		return rail.Action{}, malformed(field(t.Currency), "required")
	}

	if raw, ok := args[t.Metadata]; ok && t.Metadata != "" {
		md, ok := asObject(raw)
		if !ok {
			return rail.Action{}, malformed(field(t.Metadata), "must be an object of key-value pairs")
		}
		// checkJSON has refused keys equal up to case; a case variant of
		// the stamp key is left, which the server would echo beside the
		// stamp ext_proc writes.
		keys := make([]string, 0, len(md))
		for k := range md {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var seen rail.KeySet
		for _, k := range keys {
			if err := seen.Add(k); err != nil {
				return rail.Action{}, malformed(field(t.Metadata), "%v", err)
			}
		}
		if raw, ok := md[sik.StampKey]; ok {
			// Countersign's: ext_proc overwrites it, and the engine judges
			// what was sent where none will.
			if a.SentStamp, ok = asString(raw); !ok {
				a.SentStamp = string(rail.TrimJSONSpace(raw))
			}
		}
		delete(md, sik.StampKey)
		if limit := maxMetadataKeys[ad.rail] - 1; len(md) > limit {
			return rail.Action{}, malformed(field(t.Metadata), "%d keys; at most %d, as Countersign adds %s", len(md), limit, sik.StampKey)
		}
		for k, v := range md {
			text, ok := asString(v)
			if !ok {
				text = string(rail.TrimJSONSpace(v))
			}
			if err := rail.AddLabel(&a.Labels, t.Metadata+"."+k, text, true); err != nil {
				return rail.Action{}, malformed(field(t.Metadata), "%v", err)
			}
		}
	}

	// An ignored argument changes nothing, but it is still a scalar: an
	// object or null may mean something at the server. It is a label, and
	// free text: the server, not Countersign, decides what it accepts.
	for _, e := range t.Ignored {
		if raw, ok := args[e]; ok {
			v, err := scalar(raw)
			if err != nil {
				return rail.Action{}, malformed(field(e), "%v", err)
			}
			if err := rail.AddLabel(&a.Labels, e, v, true); err != nil {
				return rail.Action{}, malformed(field(e), "%v", err)
			}
		}
	}
	extra := map[string]string{}
	for _, e := range t.Extra {
		raw, ok := args[e]
		if !ok {
			if d := t.Defaults[e]; d != "" {
				extra[e] = d
			}
			continue
		}
		v, err := keyScalar(raw)
		if err != nil {
			return rail.Action{}, malformed(field(e), "%v", err)
		}
		vs, listed := t.Values[e]
		if listed && !slices.Contains(vs, v) {
			return rail.Action{}, malformed(field(e), "%.40q is not one of %q", v, vs)
		}
		// An Extra with no list of values takes what the model wrote (a
		// string or an integer; a boolean is not text, the default is the
		// owner's): it is keyed, and also a free-text label, so the
		// mandate's free_text sees it (found by a review: text in a keyed
		// member left past free_text: refuse).
		if !listed && v != "" && v != "true" && v != "false" && v != t.Defaults[e] {
			if err := rail.AddLabel(&a.Labels, e, v, true); err != nil {
				return rail.Action{}, malformed(field(e), "%v", err)
			}
		}
		if v == "" {
			v = t.Defaults[e]
		}
		if v != "" {
			extra[e] = v
		}
	}
	if len(extra) > 0 {
		a.Extra = extra
	}
	return a, nil
}

// declares reports whether arg is one of the tool's arguments.
func (t Tool) declares(arg string) bool {
	switch arg {
	case "":
		return false
	case t.Subject, t.Amount, t.Currency, t.Metadata:
		return true
	}
	return slices.Contains(t.Extra, arg) || slices.Contains(t.Ignored, arg)
}

// scalar renders an argument: a string as itself, a boolean or an integer
// literal as written. Null, objects, arrays and fractions are refused:
// their meaning at the server is not Countersign's to guess.
func scalar(raw json.RawMessage) (string, error) {
	s := string(rail.TrimJSONSpace(raw))
	if v, ok := asString(raw); ok {
		if !utf8.ValidString(v) {
			return "", fmt.Errorf("not valid UTF-8")
		}
		return v, nil
	}
	switch s {
	case "true", "false":
		return s, nil
	case "null":
		return "", fmt.Errorf("null; omit it instead")
	}
	if integerLiteral(s) {
		return s, nil
	}
	return "", fmt.Errorf("%.40s is not a string, boolean or integer", s)
}

// keyScalar is scalar for an Extra argument, whose rendering enters the
// key. The key holds the rendering, not the JSON type, so one rendering
// must stand for one value at the server, and one value have one
// rendering:
//   - a string that reads as a boolean or an integer is refused ("false"
//     is true to a server that tests the value's truth, while the literal
//     false keys alike);
//   - an integer must be one a JavaScript server reads exactly (|n| <
//     2^53: beyond, two literals are one number there but two keys here),
//     and not -0 (0 there, another key here).
func keyScalar(raw json.RawMessage) (string, error) {
	v, err := scalar(raw)
	switch {
	case err != nil:
		return "", err
	case len(rail.TrimJSONSpace(raw)) > 0 && rail.TrimJSONSpace(raw)[0] == '"':
		if v == "true" || v == "false" || integerLiteral(v) {
			return "", fmt.Errorf("the string %.40q reads as a JSON literal; send the literal itself", v)
		}
	case v == "-0":
		return "", fmt.Errorf("-0 is 0 to the server; send 0")
	case integerLiteral(v):
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n > maxAmount || n < -maxAmount {
			return "", fmt.Errorf("%.40s is beyond what a JavaScript server reads exactly (|n| < 2^53)", v)
		}
	}
	return v, nil
}

// integerLiteral reports whether s is a JSON integer literal: an optional
// minus, then 0 or digits without a leading zero.
func integerLiteral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// readArguments checks a read-only tool's arguments: every argument named
// id or …_id that is a string must be a rail id (rail.IsID). Servers put such
// an argument into the rail's path, and Razorpay's SDK does so unescaped
// for orders and payment links, so order_id "../payments/pay_1/card" or
// "order_1?expand[]=card" read what the read-only tool was not listed for
// (found by a review). Other arguments (a documentation search's text,
// counts, times) are the server's to read.
func readArguments(raw json.RawMessage) error {
	if t := rail.TrimJSONSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil
	}
	args, ok := asObject(raw)
	if !ok {
		return malformed("params.arguments", "a tool's arguments are an object")
	}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		// By any case: a Go server decoding into a struct reads "ID" as its
		// id field (found by a review).
		if l := strings.ToLower(k); l != "id" && !strings.HasSuffix(l, "_id") {
			continue
		}
		if v, isString := asString(args[k]); isString && !rail.IsID(v) {
			return malformed("params.arguments."+k, "an id is 1 to 255 letters, digits and underscores (a server may put it into the rail's path)")
		}
	}
	return nil
}

// isCurrency reports whether v is three ASCII letters (either case).
func isCurrency(v string) bool {
	if len(v) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c := v[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
