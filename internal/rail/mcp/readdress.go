package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sse"
)

// Readdress gives the agent back its own id: a money-moving call leaves
// with Countersign's id (rail.Stamped.CallID, from) in place of the one the
// agent sent (to), and the answer that returns must carry the agent's, or
// its client cannot match it to the call. Every JSON-RPC response in body
// naming from, the JSON body itself or a message event of an SSE stream,
// gets to as its id; nothing else changes (other events keep their bytes,
// a response's other members their values). changed is false, and body is
// returned as it came, when no response names from: an answer that is not
// JSON-RPC, or another request's, which the engine does not take for the
// call's either (rail.Classification.CheckCall).
func Readdress(resp rail.Response, from string, to json.RawMessage) (body []byte, changed bool, err error) {
	if !validID(to) {
		return nil, false, fmt.Errorf("mcp: readdress: %q is not a JSON-RPC request id", to)
	}
	trimmed := bytes.TrimSpace(resp.Body)
	if len(trimmed) == 0 {
		return resp.Body, false, nil
	}
	if !isEventStream(resp.Headers, trimmed) {
		out, ok, err := readdressMessage(trimmed, from, to)
		if err != nil || !ok {
			return resp.Body, false, err
		}
		return out, true, nil
	}
	return readdressStream(resp.Body, from, to)
}

// readdressMessage rewrites the id of one JSON-RPC response naming from.
func readdressMessage(data []byte, from string, to json.RawMessage) ([]byte, bool, error) {
	m, ok := asObject(data)
	if !ok {
		return nil, false, nil
	}
	if _, isRequest := m["method"]; isRequest {
		return nil, false, nil
	}
	if id, ok := asString(m["id"]); !ok || id != from {
		return nil, false, nil
	}
	m["id"] = to
	out, err := marshal(m)
	if err != nil {
		return nil, false, fmt.Errorf("mcp: readdress: %w", err)
	}
	return out, true, nil
}

// readdressStream rewrites, in an SSE stream, the data of each complete
// message event that is a response naming from: its data lines become one
// line holding the re-addressed response (JSON text has no line break);
// every other line keeps its bytes. The event grammar is sseMessages'.
func readdressStream(body []byte, from string, to json.RawMessage) ([]byte, bool, error) {
	// A leading byte order mark is dropped, as the client's UTF-8 decoding
	// drops it, so that the first event is read here as there (sseMessages).
	if trimmed := bytes.TrimPrefix(body, []byte("\ufeff")); len(trimmed) != len(body) {
		out, _, err := readdressStream(trimmed, from, to)
		return out, true, err
	}
	var out bytes.Buffer
	changed := false
	var tail []sse.Line // an unfinished event: left as it is
	for ev, err := range sse.Events(body) {
		if err != nil {
			return nil, false, fmt.Errorf("mcp: readdress: %w", err)
		}
		if ev.End == "" {
			tail = ev.Lines
			break
		}
		event, hasData := "", false
		var data []string
		for _, ln := range ev.Lines {
			name, value, _ := strings.Cut(ln.Text, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "data":
				data, hasData = append(data, value), true
			case "event":
				event = value
			}
		}
		var rewritten []byte
		if hasData && (event == "" || event == "message") {
			r, ok, err := readdressMessage([]byte(strings.Join(data, "\n")), from, to)
			if err != nil {
				return nil, false, err
			}
			if ok {
				rewritten = r
			}
		}
		written := false
		for _, ln := range ev.Lines {
			name, _, _ := strings.Cut(ln.Text, ":")
			switch {
			case rewritten == nil || name != "data":
				out.WriteString(ln.Text)
				out.WriteString(ln.End)
			case !written: // the event's first data line holds it all
				out.WriteString("data: ")
				out.Write(rewritten)
				out.WriteString(ln.End)
				written, changed = true, true
			}
		}
		out.WriteString(ev.End)
	}
	if !changed {
		return body, false, nil
	}
	for _, ln := range tail {
		out.WriteString(ln.Text)
		out.WriteString(ln.End)
	}
	return out.Bytes(), true, nil
}
