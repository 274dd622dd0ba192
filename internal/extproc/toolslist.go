package extproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/extauthz"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
)

// toolsList is an exchange's MCP tools/list check: ext_authz allowed the
// agent's tools/list under a mandate with MCP pins
// (engine.ToolsListCheck), and the answer reaches the agent only if it
// matches them (mcp.CheckListed). G6 reads the server's list itself at
// each pinned tools/call, but a server can tell that read from the
// agent's; what the agent is shown is judged here, on its own bytes.
type toolsList struct {
	check engine.ToolsListCheck
	// unreadable: the metadata names a check that cannot be read; the
	// answer is withheld (fail closed).
	unreadable bool
	// withheld: a body phase of this answer was already replaced; any
	// further one is emptied.
	withheld bool
}

// errListCheckUnreadable stands for a check whose metadata cannot be read.
var errListCheckUnreadable = errors.New("ext_authz's tools/list check metadata cannot be read")

// toolsListOf reads the check from the forwarded dynamic metadata; nil
// when there is none.
func toolsListOf(req *extprocv3.ProcessingRequest) *toolsList {
	md := req.GetMetadataContext().GetFilterMetadata()[extauthz.MetadataNamespace]
	c, present, ok := extauthz.ToolsListFromMetadata(md)
	if !present {
		return nil
	}
	return &toolsList{check: c, unreadable: !ok}
}

// checksAnswer reports whether the answer, whose status is status, holds
// a list to check: a 2xx (an MCP client reads a list from any of them);
// an error status carries none.
func checksAnswer(status int) bool {
	return status >= http.StatusOK && status < http.StatusMultipleChoices
}

// notAListAnswer reports whether a checked tools/list's answer, of status
// status, is one a client would not read the list from here but go on to
// read it elsewhere: any status but 200 that is not an error. A 202 makes
// the TypeScript SDK drop the body and wait for the response on the
// server's GET stream, and a 3xx is followed (to a GET the route does not
// process): both were ways to show the agent an unchecked list (found by a
// review). Error statuses are thrown by clients, list or not.
func notAListAnswer(status int) bool {
	return status != http.StatusOK && status < http.StatusBadRequest
}

// toolsListElsewhere answers the response headers of a checked tools/list
// that notAListAnswer refuses with Countersign's own 200 and the JSON-RPC
// error to the agent's id: a status cannot be changed by a header
// mutation (the shipped configs disallow system headers), so the answer
// is replaced whole. An immediate response sent while Envoy still holds
// the response headers is sent downstream in their place (ext_proc's
// ProcessingResponse.immediate_response: "attempt to create a locally
// generated response, send it downstream").
func (s *Server) toolsListElsewhere(x *exchange) *extprocv3.ProcessingResponse {
	body, _, _ := s.withholdList(x, fmt.Errorf("mcp: the server answered HTTP %d, not a tools list", x.status))
	return immediate(http.StatusOK, body, "countersign_mcp_tools_list_withheld")
}

// isRedirect reports whether status sends the client elsewhere.
func isRedirect(status int) bool {
	return status >= http.StatusMultipleChoices && status < http.StatusBadRequest
}

// answerElsewhere replaces whole an MCP answer that redirects (see
// isRedirect's caller): Countersign's 200 with the JSON-RPC error to own,
// or, for a notification's answer (own nil), an empty 202.
func (s *Server) answerElsewhere(x *exchange, own json.RawMessage) *extprocv3.ProcessingResponse {
	s.log.Warn("MCP answer redirects; the agent receives an error in its place", "status", x.status)
	if own == nil {
		return immediate(http.StatusAccepted, nil, "countersign_mcp_redirect_withheld")
	}
	return immediate(http.StatusOK, mcp.AnswerRefusal(own), "countersign_mcp_redirect_withheld")
}

// withholdAnswer replaces a body phase of an MCP answer that carries a
// response to another request (mcp.CheckOwnAnswer) by the error to own.
func (s *Server) withholdAnswer(x *exchange, own json.RawMessage, err error) *extprocv3.ProcessingResponse {
	s.log.Warn("MCP answer carries a response to another request; the agent receives an error in its place", "err", err)
	body := mcp.AnswerRefusal(own)
	set := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if _, ok := x.headers["content-length"]; ok {
		set = append(set, setHeader("content-length", strconv.Itoa(len(body))))
	}
	var remove []string
	if _, ok := x.headers["content-encoding"]; ok {
		remove = append(remove, "content-encoding")
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		},
	}}}
}

// toolsListBody answers a response body phase of a checked tools/list:
// unchanged when it matches the pins, otherwise replaced by the JSON-RPC
// error to the agent's request id (mcp.ListRefusal). Envoy's BUFFERED
// mode sends the whole body in one phase (end_of_stream, or followed by
// trailers), so each phase is judged as the whole answer; a part would
// not parse and is withheld (fail closed).
func (s *Server) toolsListBody(x *exchange, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	l := x.toolsList
	if !checksAnswer(x.status) {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	}
	if l.withheld {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
			Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte{}}}},
		}}}
	}
	err := errListCheckUnreadable
	resp := rail.Response{Status: x.status, Headers: x.headers, Body: b.GetBody()}
	switch {
	case l.unreadable:
	case l.check.OwnAnswer:
		err = mcp.CheckOwnAnswer(resp, l.check.RequestID)
	default:
		err = mcp.CheckListed(resp, l.check.RequestID, l.check.Pins)
	}
	if err == nil {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
	}
	body, set, remove := s.withholdList(x, err)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		},
	}}}
}

// toolsListHeaders answers response headers that end a checked
// tools/list's stream: a 2xx with no body holds no list, and is given the
// error in its place (Envoy adds a body to headers answered
// CONTINUE_AND_REPLACE with a body mutation, as replaceEmptyBody does for
// a request).
func (s *Server) toolsListHeaders(x *exchange) *extprocv3.ProcessingResponse {
	body, set, remove := s.withholdList(x, errors.New("mcp: the answer has no body"))
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{
		Response: &extprocv3.CommonResponse{
			Status:         extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set, RemoveHeaders: remove},
			BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}},
		},
	}}}
}

// withholdList logs a refused tools/list answer and returns the error
// body the agent receives in its place, with the headers that describe
// it: JSON, its own length when one was declared, no content coding.
func (s *Server) withholdList(x *exchange, err error) (body []byte, set []*corev3.HeaderValueOption, remove []string) {
	l := x.toolsList
	l.withheld = true
	s.log.Warn("MCP tools/list answer does not match the mandate's pins; the agent receives an error in its place",
		"request_id", string(l.check.RequestID), "status", x.status, "err", err)
	body = mcp.ListRefusal(l.check.RequestID, err)
	if l.check.OwnAnswer {
		body = mcp.AnswerRefusal(l.check.RequestID)
	}
	set = []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if _, ok := x.headers["content-length"]; ok {
		set = append(set, setHeader("content-length", strconv.Itoa(len(body))))
	}
	if _, ok := x.headers["content-encoding"]; ok {
		remove = append(remove, "content-encoding")
	}
	return body, set, remove
}
