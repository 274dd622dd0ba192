package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// Classify implements rail.Adapter. The answer to a tools/call is a
// JSON-RPC response, as one JSON body or as a "message" event of an SSE
// stream. A result that is not an error and carries the created entity is
// Applied; everything else is Ambiguous unless the server clearly says the
// tool never ran or the rail refused it.
func (ad *adapter) Classify(a rail.Action, resp rail.Response) rail.Classification {
	switch {
	case resp.TransportErr != nil:
		// The error's text may quote bytes the server sent.
		return ambiguous("no answer from the MCP server: %s", inert.Text(resp.TransportErr.Error()))
	case resp.Status == 0:
		return ambiguous("no answer from the MCP server")
	}
	if coding, encoded := encodedAnswer(resp.Headers); encoded {
		// Bytes Countersign cannot read: not a refusal it can vouch for,
		// nor a result.
		return ambiguous("the MCP server answered %d with its body in content coding %q, which Countersign does not read", resp.Status, snippet([]byte(coding)))
	}
	switch {
	case resp.Status >= 500:
		return ambiguous("the MCP server answered %d: %s", resp.Status, snippet(resp.Body))
	case refusedBeforeDispatch(resp.Status):
		// Streamable HTTP refuses a message at the HTTP layer (bad or
		// unknown session, wrong Accept or content type, auth, rate
		// limit) before any tool runs, but so may a proxy or WAF after
		// it ran: only the SDK's own JSON-RPC error proves the former.
		// The refusal is the exchange's own, so no CallID: SDKs answer
		// it under id null (TypeScript) or "server-error" (Python).
		return ad.classifyRefusal(resp)
	case resp.Status < 200 || resp.Status > 299:
		return ambiguous("the MCP server answered an unexpected %d: %s", resp.Status, snippet(resp.Body))
	}
	msg, err := responseMessage(resp)
	if err != nil {
		// Its errors render the server's bytes inert themselves.
		return ambiguous("the MCP server answered %d but %v", resp.Status, err)
	}
	var c rail.Classification
	if raw, ok := msg["error"]; ok {
		c = classifyError(ad.rail, raw)
	} else {
		c = ad.classifyResult(a, msg["result"])
	}
	// The answer is the call's only if it names the call's id, which the
	// engine checks (rail.Classification.CheckCall): a server routing
	// answers by id may hand this stream another request's.
	c.CallID = callID(msg["id"])
	return c
}

// callID is a response's id as canonical JSON text: a string re-encoded
// (so that escapes compare as what they spell), a number as sent, "null"
// for none.
func callID(raw json.RawMessage) string {
	if s, ok := asString(raw); ok {
		b, err := json.Marshal(s)
		if err != nil {
			return "null"
		}
		return string(b)
	}
	if t := bytes.TrimSpace(raw); len(t) > 0 {
		return string(t)
	}
	return "null"
}

func ambiguous(format string, args ...any) rail.Classification {
	return rail.Classification{Outcome: rail.Ambiguous, Reason: fmt.Sprintf(format, args...)}
}

func refusedBeforeDispatch(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusNotAcceptable, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusTooManyRequests:
		return true
	}
	return false
}

// responseMessage finds the one JSON-RPC response in a 2xx answer.
func responseMessage(resp rail.Response) (object, error) {
	body := bytes.TrimSpace(resp.Body)
	if len(body) == 0 {
		return nil, fmt.Errorf("with no body: the tool's result never arrived")
	}
	var candidates [][]byte
	if isEventStream(resp.Headers, body) {
		events, err := sseMessages(resp.Body) // untrimmed: the final blank line ends the last event
		if err != nil {
			return nil, err
		}
		candidates = events
	} else {
		candidates = [][]byte{body}
	}
	var found object
	for _, c := range candidates {
		if bytes.HasPrefix(bytes.TrimSpace(c), []byte("{")) {
			// A member twice, or in two cases, is read one way here and
			// another by the agent's client: not an answer to vouch for.
			if err := rail.CheckAnswerJSON(c); err != nil {
				// The error may quote a member name the server wrote.
				return nil, fmt.Errorf("with a message Countersign cannot read one way: %s", inert.Text(err.Error()))
			}
		}
		m, ok := asObject(c)
		if !ok {
			if bytes.HasPrefix(bytes.TrimSpace(c), []byte("[")) {
				return nil, fmt.Errorf("with a JSON-RPC batch, not one response")
			}
			return nil, fmt.Errorf("with a message that is not a JSON-RPC object: %s", snippet(c))
		}
		if method, isRequest := m["method"]; isRequest {
			// A server request or notification on the stream, skipped; but
			// a "method" with a result or an error, or one that is not a
			// name, is a response some clients read as one (found by a
			// review): refused, not skipped.
			_, hasResult := m["result"]
			_, hasError := m["error"]
			if name, ok := asString(method); !ok || name == "" || hasResult || hasError {
				return nil, fmt.Errorf("with a message that is both a request and a response: %s", snippet(c))
			}
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("with more than one JSON-RPC response")
		}
		found = m
	}
	if found == nil {
		return nil, fmt.Errorf("without a JSON-RPC response: the tool's result never arrived")
	}
	if v, _ := asString(found["jsonrpc"]); v != "2.0" {
		return nil, fmt.Errorf("with a message that is not JSON-RPC 2.0: %s", snippet(body))
	}
	_, hasResult := found["result"]
	_, hasError := found["error"]
	if hasResult == hasError {
		return nil, fmt.Errorf("with a response that has %s", map[bool]string{true: "both result and error", false: "neither result nor error"}[hasResult])
	}
	return found, nil
}

func isEventStream(headers map[string]string, body []byte) bool {
	for k, v := range headers {
		if strings.EqualFold(k, "content-type") {
			mt, _, err := mime.ParseMediaType(v)
			if err == nil {
				return mt == "text/event-stream"
			}
		}
	}
	// No usable content type: a JSON answer starts with a brace.
	return body[0] != '{' && body[0] != '['
}

// sseMessages returns the data of the stream's complete "message" events
// (the default event type), per the HTML server-sent events grammar. An
// event the stream did not finish with a blank line is discarded, as a
// browser does: a cut stream is not an answer.
func sseMessages(body []byte) ([][]byte, error) {
	// A stream is decoded as UTF-8, which drops one leading byte order
	// mark (WHATWG "event stream interpretation"; the TypeScript SDK's
	// TextDecoderStream does): read with it, the first line's field would
	// be "\ufeffdata", and its event hidden from Countersign but not from
	// the client (found by a review).
	text := strings.TrimPrefix(string(body), "\ufeff")
	// A CR that is the last byte may be the first half of a CRLF still to
	// come: the client's parser (eventsource-parser) holds that line as
	// unfinished, so it is not an end here either (found by a review: a
	// message ended so was read here and never by the client).
	text = strings.TrimSuffix(text, "\r")
	text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\r", "\n")
	var out [][]byte
	var data []string
	event, hasData := "", false
	for _, line := range strings.SplitAfter(text, "\n") {
		complete := strings.HasSuffix(line, "\n")
		line = strings.TrimSuffix(line, "\n")
		if !complete {
			break // the last line has no end: the event is unfinished
		}
		if line == "" {
			if hasData && (event == "" || event == "message") {
				out = append(out, []byte(strings.Join(data, "\n")))
			}
			data, event, hasData = nil, "", false
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "": // a comment
		case "data":
			data, hasData = append(data, value), true
		case "event":
			event = value
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("with an event stream that holds no complete message")
	}
	return out, nil
}

// toolResult is the part of a CallToolResult Classify reads.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (r toolResult) text() string {
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" && c.Text != "" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// classifyResult reads a tools/call result.
func (ad *adapter) classifyResult(a rail.Action, raw json.RawMessage) rail.Classification {
	var r toolResult
	if o, ok := asObject(raw); !ok || json.Unmarshal(raw, &r) != nil {
		return ambiguous("the tool's result is not a CallToolResult: %s", snippet(raw))
	} else if _, isTask := o["task"]; isTask {
		return ambiguous("the server answered with a task, not the tool's result")
	}
	if r.IsError {
		return classifyText(ad.rail, "the tool reported an error", r.text())
	}
	// The entity is the structured content or a text item holding a JSON
	// object (Stripe's toolkit and Razorpay's server return it as text).
	var entities []json.RawMessage
	if _, ok := asObject(r.StructuredContent); ok {
		entities = append(entities, r.StructuredContent)
	}
	for _, c := range r.Content {
		if t := []byte(strings.TrimSpace(c.Text)); c.Type == "text" && json.Valid(t) {
			if _, ok := asObject(t); ok {
				entities = append(entities, t)
			}
		}
	}
	if len(entities) == 0 {
		return ambiguous("the tool answered without the created entity: %s", snippet([]byte(r.text())))
	}
	var applied []rail.Classification
	for _, e := range entities {
		if c := ad.classifyEntity(a, e); c.Outcome == rail.Applied {
			applied = append(applied, c)
		}
	}
	if len(applied) == 0 {
		return ad.classifyEntity(a, entities[0]) // the first entity's reason
	}
	for _, c := range applied[1:] {
		if c.EntityID != applied[0].EntityID {
			return ambiguous("the tool's result names two entities, %s and %s", snippet([]byte(applied[0].EntityID)), snippet([]byte(c.EntityID)))
		}
	}
	return applied[0]
}

// classifyEntity reads one created entity: first as the underlying rail's
// own 2xx body, which checks everything it carries; failing that as the
// partial view MCP tools often return (Stripe's toolkit returns only id,
// status and amount), Applied when it has an id and contradicts nothing
// the action says.
func (ad *adapter) classifyEntity(a rail.Action, e json.RawMessage) rail.Classification {
	if err := rail.CheckAnswerJSON(e); err != nil {
		// In a text item the entity is JSON the agent parses itself.
		return ambiguous("the tool answered but its entity cannot be read one way: %s", inert.Text(err.Error()))
	}
	c := ad.under.Classify(a, rail.Response{Status: http.StatusOK, Body: e})
	if c.Outcome == rail.Applied {
		c.Reason = "via MCP: " + c.Reason
		return c
	}
	p, err := readPartial(ad.rail, a, e)
	if err != nil {
		// readPartial's errors render the server's bytes inert themselves.
		return ambiguous("the tool answered but %v", err)
	}
	return rail.Classification{Outcome: rail.Applied, EntityID: p.id, Stamp: p.stamp,
		Reason: fmt.Sprintf("via MCP: the tool created %s %s", a.Kind, p.id)} // rail.IsID: no markup
}

// entityShape is where each rail writes an entity's type, subject and
// key-value pairs.
type entityShape struct {
	typeField string
	stampIn   string
	subject   map[sik.Kind][]string
}

var shapes = map[sik.Rail]entityShape{
	sik.RailStripe: {typeField: "object", stampIn: "metadata", subject: map[sik.Kind][]string{
		sik.KindRefund: {"payment_intent", "charge"}, sik.KindPayout: {"destination"}, sik.KindTransfer: {"destination"}}},
	sik.RailRazorpay: {typeField: "entity", stampIn: "notes", subject: map[sik.Kind][]string{
		sik.KindRefund: {"payment_id"}, sik.KindPayout: {"fund_account_id"}}},
}

type partial struct{ id, stamp string }

// readPartial accepts an entity that has an id and whose type, amount,
// currency and subject, where present, are the action's.
func readPartial(r sik.Rail, a rail.Action, raw json.RawMessage) (partial, error) {
	o, _ := asObject(raw)
	shape := shapes[r]
	checked := append([]string{"id", shape.typeField, "amount", "currency", shape.stampIn}, shape.subject[a.Kind]...)
	for k := range o {
		for _, n := range checked {
			if k != n && strings.EqualFold(k, n) {
				// Read here by its exact name, by a client that ignores
				// case as the member checked.
				return partial{}, fmt.Errorf("its result names %s as %s", n, snippet([]byte(k)))
			}
		}
	}
	id, _ := asString(o["id"])
	if !rail.IsID(id) {
		return partial{}, fmt.Errorf("its result has no entity id: %s", snippet(raw))
	}
	if id == a.Subject {
		return partial{}, fmt.Errorf("its result is %s, the action's subject, not the entity it created", id)
	}
	if t, ok := o[shape.typeField]; ok {
		if s, _ := asString(t); s != string(a.Kind) {
			return partial{}, fmt.Errorf("%s is a %s, not a %s", id, snippet(t), a.Kind)
		}
	}
	if amt, ok := o["amount"]; ok {
		n, err := minorUnits(amt)
		switch {
		case err != nil:
			return partial{}, fmt.Errorf("%s has amount %s", id, snippet(amt))
		case a.AmountMinor != nil && n != *a.AmountMinor:
			return partial{}, fmt.Errorf("%s %s is for %d, the request for %d", a.Kind, id, n, *a.AmountMinor)
		}
	}
	if cur, ok := o["currency"]; ok && a.Currency != "" {
		if s, _ := asString(cur); !strings.EqualFold(s, a.Currency) {
			return partial{}, fmt.Errorf("%s %s is in %s, the request in %s", a.Kind, id, snippet(cur), a.Currency)
		}
	}
	names, matched, seen := shape.subject[a.Kind], false, false
	for _, f := range names {
		v, ok := o[f]
		if !ok || string(v) == "null" {
			continue
		}
		seen = true
		s, isStr := asString(v)
		if !isStr { // expanded: {"id": …}
			inner, _ := asObject(v)
			s, _ = asString(inner["id"])
		}
		matched = matched || s == a.Subject
	}
	if seen && !matched {
		return partial{}, fmt.Errorf("%s %s is not for %s", a.Kind, id, a.Subject)
	}
	p := partial{id: id}
	if md, ok := asObject(o[shape.stampIn]); ok {
		p.stamp, _ = asString(md[sik.StampKey])
	}
	return p, nil
}

// snippet quotes at most 200 bytes of b, the server's or a tool's text,
// for a reason sentence. A reason becomes the intent's and leaves in the
// signed intent.failed and intent.quarantined webhooks, and a tool's error
// may echo the agent's arguments: so the text is rendered inert (no <, >,
// |, quote, backtick or line break survives; inert.Text), and the quotes
// around it are Countersign's own.
func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		b = b[:200]
	}
	return `"` + inert.Text(string(b)) + `"`
}

// ReplayFor re-addresses a stored answer to a new request: it extracts the
// one JSON-RPC response from stored (a JSON body or an SSE stream) and
// returns it as a JSON body whose id is id. A duplicate of an APPLIED
// intent must be answered with the rail's stored result, but an MCP client
// matches answers by id, and the stored one carries the first call's id.
func ReplayFor(id json.RawMessage, stored rail.Response) ([]byte, error) {
	if !validID(id) {
		return nil, fmt.Errorf("mcp: replay: %q is not a JSON-RPC request id", id)
	}
	msg, err := responseMessage(stored)
	if err != nil {
		return nil, fmt.Errorf("mcp: replay: the stored answer %w", err)
	}
	msg["id"] = id
	return marshal(msg)
}
