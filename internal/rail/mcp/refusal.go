package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/countersign/countersign/internal/inert"
	"github.com/countersign/countersign/internal/rail"
)

// classifyRefusal reads a 4xx that Streamable HTTP answers before any
// tool runs (refusedBeforeDispatch). The status alone proves nothing: a
// proxy, WAF or gateway between Countersign and the server may answer
// 4xx after the tool ran, and Rejected would reopen the identical request
// under a new stamp generation, a new idempotency key at the rail: a
// second payment. Nor does any JSON-RPC error body: one naming the call's
// own id, or carrying a code the SDKs' transports never write at the HTTP
// layer, is what an error after dispatch looks like, relayed with a 4xx.
// So it is Rejected only when the body is the refusal the MCP SDKs' HTTP
// transports write (refusalError): id null or "server-error" (sdkRefusalID)
// and a code from preDispatch; and the rail's vocabulary in it says
// nothing else. Any other JSON-RPC error reads as its text says
// (classifyText: the rail's words keep their meaning, anything else is
// Ambiguous), never more definite than the same error in a 200. A body
// holding a result, a proxy's page, an empty or unreadable body is
// Ambiguous, for the reconciler to settle by listing.
func (ad *adapter) classifyRefusal(resp rail.Response) rail.Classification {
	id, code, text, err := refusalError(resp.Body)
	if err != nil {
		return ambiguous("the MCP server answered %d, but %s, so it does not prove the tool never ran: %s", resp.Status, inert.Text(err.Error()), snippet(resp.Body))
	}
	what := fmt.Sprintf("the MCP server refused the request with %d and JSON-RPC error %d", resp.Status, code)
	if o, said := textSays(ad.rail, text); said && o != rail.Rejected {
		// A relayed idempotency or rail failure means what it says
		// whatever the status.
		return rail.Classification{Outcome: o, Reason: fmt.Sprintf("%s: %s", what, snippet([]byte(text)))}
	}
	if !sdkRefusalID(id) || !preDispatch(code, text) {
		return classifyText(ad.rail, fmt.Sprintf("the MCP server answered %d with JSON-RPC error %d under id %s, not a refusal its transport writes before any tool runs",
			resp.Status, code, snippet(id)), text)
	}
	return rail.Classification{Outcome: rail.Rejected,
		Reason: fmt.Sprintf("%s before running the tool: %s", what, snippet([]byte(text)))}
}

// sdkRefusalID says whether id is the one the SDKs' HTTP transports give a
// refusal written before the message reaches a handler: null (TypeScript,
// packages/server/src/server/streamableHttp.ts createJsonErrorResponse;
// Python since 705497a, src/mcp/server/streamable_http.py
// _create_error_response) or "server-error" (Python before that commit).
// Never a money-moving call's own: Parse accepts only an integer id (or a
// string of digits) on one, and the call leaves under a "countersign-" id.
func sdkRefusalID(id json.RawMessage) bool {
	if string(rail.TrimJSONSpace(id)) == "null" {
		return true
	}
	s, ok := asString(id)
	return ok && s == "server-error"
}

// preDispatch says whether code (with text) is one the SDKs' HTTP
// transports answer with a 4xx before dispatching the message: parse error
// (-32700: invalid JSON or JSON-RPC), invalid request (-32600: Python's
// default for session, Accept and content-type refusals; TypeScript's
// "already initialized"), -32000 (TypeScript: Accept, content type, no
// session, method not allowed, DNS-rebinding Host/Origin) and -32001
// (TypeScript: "Session not found"). Invalid params (-32602) is Python's
// answer to a message that fails validation, but also how the TypeScript
// SDK reports a tool's output failing its schema, after the tool ran: only
// input-side wording (inputSide) proves the former. Internal error
// (-32603) and method not found (-32601) are no transport refusal.
func preDispatch(code int64, text string) bool {
	switch code {
	case codeParse, codeInvalidRequest, codeServerError, codeSessionNotFound:
		return true
	case codeInvalidParams:
		return inputSide(text)
	}
	return false
}

// refusalError reads body as exactly one JSON-RPC 2.0 error response:
// members jsonrpc ("2.0"), id (null, a string or an integer) and error,
// nothing else; the error an object of an integer code, a string message
// and optional data, nothing else. It returns the id, the code and the message
// (with data, as classifyError reads it). The body is read strictly
// (rail.CheckAnswerJSON): a member twice or in two cases is read one way
// here and another by the agent's client.
func refusalError(body []byte) (id json.RawMessage, code int64, text string, err error) {
	if len(rail.TrimJSONSpace(body)) == 0 {
		return nil, 0, "", errors.New("with no body")
	}
	if err := rail.CheckAnswerJSON(body); err != nil {
		return nil, 0, "", fmt.Errorf("its body is not one JSON-RPC error (%w)", err)
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		return nil, 0, "", fmt.Errorf("its body is not one JSON-RPC error (%w)", err) // unreachable after CheckAnswerJSON
	}
	for k := range msg {
		if k != "jsonrpc" && k != "id" && k != "error" {
			return nil, 0, "", fmt.Errorf("its body carries %q beside a JSON-RPC error", k)
		}
	}
	if v, _ := asString(msg["jsonrpc"]); v != "2.0" {
		return nil, 0, "", errors.New("its body is not JSON-RPC 2.0")
	}
	id, ok := msg["id"]
	if !ok || !refusalID(id) {
		return nil, 0, "", errors.New("its body has no JSON-RPC id of null, a string or an integer")
	}
	e, ok := asObject(msg["error"])
	if !ok {
		return nil, 0, "", errors.New("its body has no JSON-RPC error object")
	}
	for k := range e {
		if k != "code" && k != "message" && k != "data" {
			return nil, 0, "", fmt.Errorf("its error carries %q", k)
		}
	}
	raw := string(rail.TrimJSONSpace(e["code"]))
	if code, err = strconv.ParseInt(raw, 10, 64); err != nil {
		return nil, 0, "", fmt.Errorf("its error's code %.20q is not an integer", raw)
	}
	if text, ok = asString(e["message"]); !ok {
		return nil, 0, "", errors.New("its error's message is not a string")
	}
	if data, ok := e["data"]; ok {
		if s, isString := asString(data); isString {
			text += ": " + s
		} else if t := rail.TrimJSONSpace(data); string(t) != "null" {
			text += ": " + string(t)
		}
	}
	return id, code, text, nil
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
