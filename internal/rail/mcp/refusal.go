package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/countersign/countersign/internal/rail"
)

// classifyRefusal reads a 4xx that Streamable HTTP answers before any
// tool runs (refusedBeforeDispatch). The status alone proves nothing: a
// proxy, WAF or gateway between Countersign and the server may answer
// 4xx after the tool ran, and Rejected would reopen the identical request
// under a new stamp generation, a new idempotency key at the rail: a
// second payment. So it is Rejected only when the body is the refusal the
// MCP SDKs write (refusalError), and the rail's vocabulary in it says
// nothing else; a body holding a result, a proxy's page, an empty or
// unreadable body is Ambiguous, for the reconciler to settle by listing.
func (ad *adapter) classifyRefusal(resp rail.Response) rail.Classification {
	code, text, err := refusalError(resp.Body)
	if err != nil {
		return ambiguous("the MCP server answered %d, but %v, so it does not prove the tool never ran: %s", resp.Status, err, snippet(resp.Body))
	}
	what := fmt.Sprintf("the MCP server refused the request with %d and JSON-RPC error %d", resp.Status, code)
	if o, said := textSays(ad.rail, text); said && o != rail.Rejected {
		// A relayed idempotency or rail failure means what it says
		// whatever the status.
		return rail.Classification{Outcome: o, Reason: fmt.Sprintf("%s: %s", what, snippet([]byte(text)))}
	}
	return rail.Classification{Outcome: rail.Rejected,
		Reason: fmt.Sprintf("%s before running the tool: %s", what, snippet([]byte(text)))}
}

// refusalError reads body as exactly one JSON-RPC 2.0 error response:
// members jsonrpc ("2.0"), id (null, a string or an integer) and error,
// nothing else; the error an object of an integer code, a string message
// and optional data, nothing else. It returns the code and the message
// (with data, as classifyError reads it). The body is read strictly
// (rail.CheckAnswerJSON): a member twice or in two cases is read one way
// here and another by the agent's client.
func refusalError(body []byte) (code int64, text string, err error) {
	if len(rail.TrimJSONSpace(body)) == 0 {
		return 0, "", errors.New("with no body")
	}
	if err := rail.CheckAnswerJSON(body); err != nil {
		return 0, "", fmt.Errorf("its body is not one JSON-RPC error (%v)", err)
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		return 0, "", fmt.Errorf("its body is not one JSON-RPC error (%v)", err) // unreachable after CheckAnswerJSON
	}
	for k := range msg {
		if k != "jsonrpc" && k != "id" && k != "error" {
			return 0, "", fmt.Errorf("its body carries %q beside a JSON-RPC error", k)
		}
	}
	if v, _ := asString(msg["jsonrpc"]); v != "2.0" {
		return 0, "", errors.New("its body is not JSON-RPC 2.0")
	}
	if id, ok := msg["id"]; !ok || !refusalID(id) {
		return 0, "", errors.New("its body has no JSON-RPC id of null, a string or an integer")
	}
	e, ok := asObject(msg["error"])
	if !ok {
		return 0, "", errors.New("its body has no JSON-RPC error object")
	}
	for k := range e {
		if k != "code" && k != "message" && k != "data" {
			return 0, "", fmt.Errorf("its error carries %q", k)
		}
	}
	raw := string(rail.TrimJSONSpace(e["code"]))
	if code, err = strconv.ParseInt(raw, 10, 64); err != nil {
		return 0, "", fmt.Errorf("its error's code %.20q is not an integer", raw)
	}
	if text, ok = asString(e["message"]); !ok {
		return 0, "", errors.New("its error's message is not a string")
	}
	if data, ok := e["data"]; ok {
		if s, isString := asString(data); isString {
			text += ": " + s
		} else if t := rail.TrimJSONSpace(data); string(t) != "null" {
			text += ": " + string(t)
		}
	}
	return code, text, nil
}

// refusalID accepts a JSON-RPC response id: null, a string, or an integer.
func refusalID(raw json.RawMessage) bool {
	t := string(rail.TrimJSONSpace(raw))
	if t == "null" {
		return true
	}
	if _, ok := asString(raw); ok {
		return true
	}
	_, err := strconv.ParseInt(t, 10, 64)
	return err == nil
}
