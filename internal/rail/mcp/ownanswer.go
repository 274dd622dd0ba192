package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/rail"
)

// ErrForeignResponse is the error of an answer that carries a JSON-RPC
// response to a request other than the one it answers.
var ErrForeignResponse = errors.New("mcp: the answer carries a response to another request")

// ReasonForeignResponse is the reason code of the error the agent receives
// in place of such an answer.
const ReasonForeignResponse = "mcp_foreign_response"

// AnswerID is the id the answer to the client message body may name in a
// response: the message's id when it is a request; nil for a notification
// or a client's response (their answer holds no response at all).
func AnswerID(body []byte) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	if _, isRequest := m["method"]; !isRequest {
		return nil
	}
	return RequestID(body)
}

// CheckOwnAnswer checks that an answer to a client message names no other
// request: a client matches a response to its pending request by id,
// whatever stream or answer carries it, so a server answering one request
// with a response to another (the agent's tools/list, with a poisoned
// list, inside a ping's stream) would have the client take it, unchecked
// (found by a review). Every JSON-RPC message of a 2xx answer (plain JSON,
// or an SSE stream's message events, read as sseMessages reads them) must
// be a server request or notification, or a response to own exactly (callID: the
// same id text, as the tools/list check compares them); own nil (a notification's answer) admits no response. A
// batch, an encoded answer or a message that is not an object fails.
func CheckOwnAnswer(resp rail.Response, own json.RawMessage) error {
	if resp.Status < http.StatusOK || resp.Status >= http.StatusMultipleChoices {
		return nil
	}
	if coding, encoded := encodedAnswer(resp.Headers); encoded {
		return fmt.Errorf("%w: the answer is encoded (%s), so which responses it carries cannot be read", ErrForeignResponse, coding)
	}
	// Read as JSON what a client may read as JSON: a body that, past one
	// byte order mark (a client's UTF-8 decoding drops it) and space,
	// opens an object or an array, whatever its Content-Type says (a
	// type the media-type parser refuses made a BOM-led JSON answer read
	// as an empty event stream here, and as JSON by the client: found by
	// a review). An event stream cannot start so (that line would be a
	// field named "{…", which no client reads).
	body := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(resp.Body), []byte("\ufeff")))
	if len(body) == 0 {
		return nil
	}
	messages := [][]byte{body}
	if body[0] != '{' && body[0] != '[' {
		// No complete message event (sseMessages' error) is nothing a
		// client reads: no message to judge.
		messages, _ = sseMessages(resp.Body)
	}
	for _, raw := range messages {
		if err := checkJSON(raw); err != nil {
			return fmt.Errorf("%w: %w", ErrForeignResponse, err)
		}
		m, ok := asObject(raw)
		if !ok {
			return fmt.Errorf("%w: a message that is not one JSON-RPC object", ErrForeignResponse)
		}
		_, hasResult := m["result"]
		_, hasError := m["error"]
		if method, isRequest := m["method"]; isRequest {
			if name, ok := asString(method); !ok || name == "" || hasResult || hasError {
				return fmt.Errorf("%w: a message that is both a request and a response", ErrForeignResponse)
			}
			continue
		}
		if own == nil {
			return fmt.Errorf("%w: a response in the answer to a notification", ErrForeignResponse)
		}
		if callID(m["id"]) != callID(own) {
			return fmt.Errorf("%w: a response to id %s in the answer to id %s", ErrForeignResponse, snippet(m["id"]), own)
		}
	}
	return nil
}

// AnswerRefusal is what the agent receives in place of an answer
// CheckOwnAnswer refused: the JSON-RPC error to own, or, for a
// notification's answer (own nil), nothing.
func AnswerRefusal(own json.RawMessage) []byte {
	if own == nil {
		return []byte{}
	}
	return RefusalFor(own, ReasonForeignResponse, "The MCP server's answer carried a response to another request, which a client would take for that request's answer; Countersign withheld it.")
}

// encodedAnswer reports an answer's content coding other than identity:
// Countersign asks for checked answers unencoded, and reads an encoded
// one as bytes the client would not (it decodes them).
func encodedAnswer(headers map[string]string) (coding string, encoded bool) {
	for k, v := range headers {
		if strings.EqualFold(k, "content-encoding") && !strings.EqualFold(strings.TrimSpace(v), "identity") {
			return v, true
		}
	}
	return "", false
}
