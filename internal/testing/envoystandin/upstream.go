package envoystandin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Bodies of the router's local replies.
const (
	resetBeforeHeaders = "upstream connect error or disconnect/reset before headers. reset reason: "
	upstreamTimeout    = "upstream request timeout"
)

// forward is the router (envoy.filters.http.router): it sends the request
// as the filters left it to the route's cluster over plain HTTP/1.1, with
// :authority rewritten to host_rewrite_literal, and returns the upstream
// response with its body unread.
//
//   - A connection failure or a reset before the response headers is a 503
//     local reply, "upstream connect error or disconnect/reset before
//     headers. reset reason: …". There is no retry policy.
//   - The route timeout (default 15s) running out before the headers is a
//     504 "upstream request timeout"; running out, or a reset, while the
//     body is read resets the downstream stream (the response had started).
func (x *exchange) forward() *response {
	rt := x.route
	method, _ := x.req.first(":method")
	path, _ := x.req.first(":path")
	authority, _ := x.req.first(":authority")

	ctx, cancel := context.WithTimeout(x.ctx, rt.Timeout)
	var body io.Reader
	if len(x.body) > 0 {
		body = bytes.NewReader(x.body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rt.Upstream+"/", body) //nolint:gosec // G704: the cluster is the configured route's
	if err != nil {
		cancel()
		return localReply(http.StatusBadRequest, nil, nil)
	}
	// The path goes upstream byte for byte, as Envoy sends :path, after
	// the cluster URL's own path, if any.
	if p, q, _ := strings.Cut(path, "?"); strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") {
		base := strings.TrimSuffix(req.URL.EscapedPath(), "/")
		req.URL.Path, req.URL.RawPath, req.URL.Opaque, req.URL.RawQuery = "", "", base+p, q
	} else {
		cancel()
		return localReply(http.StatusNotFound, nil, nil)
	}
	// Envoy's router does not retry unless a retry_policy says so. Go's
	// transport would silently resend a POST carrying an Idempotency-Key
	// on a reused connection that died; without GetBody the request is not
	// replayable, so a reset reaches the agent as Envoy's 503 would.
	req.GetBody = nil
	req.Host = authority
	if rt.HostRewrite != "" {
		req.Host = rt.HostRewrite
	}
	req.Header = x.req.httpHeader()
	req.Header.Del("Content-Length")
	switch _, hasLength := x.req.first("content-length"); {
	case len(x.body) == 0:
		req.ContentLength = 0
	case hasLength:
		req.ContentLength = int64(len(x.body))
	default:
		// No content-length (a chunked request, or one ext_proc replaced
		// with CONTINUE_AND_REPLACE): the HTTP/1 codec sends it chunked.
		req.ContentLength = -1
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // no Go default user agent
	}
	// The router adds the timeout it enforces.
	req.Header.Set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(rt.Timeout.Milliseconds(), 10))

	sent := time.Now()
	resp, err := x.p.upstream.Do(req) //nolint:gosec,bodyclose // G704 as above; the body is closed by response.close
	if err != nil {
		cancel()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return localReply(http.StatusGatewayTimeout, []byte(upstreamTimeout), nil)
		}
		reason := "connection termination"
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			reason = "connection failure"
		}
		return localReply(http.StatusServiceUnavailable, []byte(resetBeforeHeaders+reason), nil)
	}
	h := &headerMap{}
	h.fromHTTP(resp.Header)
	h.set("x-envoy-upstream-service-time", strconv.FormatInt(time.Since(sent).Milliseconds(), 10))
	return &response{
		status:  resp.StatusCode,
		headers: h,
		stream:  resp.Body,
		// The upstream's headers end the stream when no body can follow.
		endOfStream: resp.ContentLength == 0 || method == http.MethodHead ||
			resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified,
		release: cancel,
	}
}
