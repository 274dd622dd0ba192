package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	procmodev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
)

// Envoy's names: the ext_authz filter's dynamic metadata namespace (which
// ext_proc forwards), and the header it adds when a body was cut at the
// bound.
const (
	authzNamespace    = "envoy.filters.http.ext_authz"
	partialBodyHeader = "x-envoy-auth-partial-body"
	// stampMember is where Countersign stamps a Stripe body.
	stampMember = "metadata[countersign_sik]"
)

// client speaks to one server as Envoy does.
type client struct {
	authz []authv3.AuthorizationClient
	proc  []extprocv3.ExternalProcessorClient
}

func newClient(p *serveProc) *client {
	c := &client{}
	for _, conn := range p.envoyConns {
		c.authz = append(c.authz, authv3.NewAuthorizationClient(conn))
		c.proc = append(c.proc, extprocv3.NewExternalProcessorClient(conn))
	}
	return c
}

// timing is one operation's latencies: until the Check answer, and until
// the last ext_proc answer (zero for a BLOCK, which has no exchange).
type timing struct{ check, exchange time.Duration }

// hooks are called between the phases of one operation (the counting run
// snapshots there).
type hooks struct{ afterCheck func() }

// checkRequest is one refund request as Envoy's ext_authz sends it.
func checkRequest(id string, a agent, form string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"rail_account": railAccount},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "POST", Host: "stripe.egress.local:15001", Path: "/v1/refunds", Protocol: "HTTP/1.1",
			Headers: map[string]string{"authorization": "Bearer " + a.secret, "content-type": "application/x-www-form-urlencoded",
				"content-length": strconv.Itoa(len(form)), partialBodyHeader: "false"},
			RawBody: []byte(form),
		}},
	}}
}

// allow is one ALLOW: the refund of allowAmount on payment i decided by
// Check, then the ext_proc exchange Envoy has with Countersign around the
// rail call — request headers, the request body (stamped by Countersign),
// the rail's response headers and body (a canned Stripe refund for the
// stamped request: the rail itself is not what is measured) — whose last
// answer comes after the attempt is committed.
func (c *client) allow(ctx context.Context, lane, i int, a agent, h hooks) (timing, error) {
	form := "payment_intent=" + paymentID(i) + "&amount=" + strconv.Itoa(allowAmount)
	start := time.Now()
	resp, err := c.authz[lane%len(c.authz)].Check(ctx, checkRequest("allow-"+strconv.Itoa(i), a, form))
	if err != nil {
		return timing{}, err
	}
	var tm timing
	tm.check = time.Since(start)
	if code := codes.Code(resp.GetStatus().GetCode()); code != codes.OK {
		return tm, fmt.Errorf("refund on %s: Check answered %s: %s", paymentID(i), code, resp.GetDeniedResponse().GetBody())
	}
	if h.afterCheck != nil {
		h.afterCheck() // not timed: the counting run snapshots here
	}
	ex, err := c.exchange(ctx, lane, i, form, resp)
	if err != nil {
		return tm, err
	}
	tm.exchange = tm.check + ex
	return tm, nil
}

// exchange is the ext_proc stream of one allowed request; it returns the
// time from opening the stream to the answer to the response body (Envoy
// forwards the rail's response to the agent then).
func (c *client) exchange(ctx context.Context, lane, i int, form string, allowed *authv3.CheckResponse) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	st, err := c.proc[lane%len(c.proc)].Process(ctx)
	if err != nil {
		return 0, err
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{authzNamespace: allowed.GetDynamicMetadata()}}
	// The request as it leaves ext_authz: its headers with the ALLOW's
	// mutations applied.
	headers := map[string]string{":method": "POST", ":path": "/v1/refunds", ":authority": "api.stripe.com", ":scheme": "https",
		"content-type": "application/x-www-form-urlencoded", "content-length": strconv.Itoa(len(form))}
	ok := allowed.GetOkResponse()
	for _, k := range ok.GetHeadersToRemove() {
		delete(headers, k)
	}
	for _, hv := range ok.GetHeaders() {
		v := hv.GetHeader().GetValue()
		if v == "" {
			v = string(hv.GetHeader().GetRawValue())
		}
		headers[hv.GetHeader().GetKey()] = v
	}
	body := []byte(form)
	call := func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		req.MetadataContext = md
		if err := st.Send(req); err != nil {
			return nil, err
		}
		r, err := st.Recv()
		if err != nil {
			return nil, err
		}
		if ir := r.GetImmediateResponse(); ir != nil {
			return nil, fmt.Errorf("ext_proc stopped the request on %s: %d %s", paymentID(i), ir.GetStatus().GetCode(), ir.GetBody())
		}
		return r, nil
	}
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(headers)}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: procmodev3.ProcessingMode_BUFFERED, ResponseBodyMode: procmodev3.ProcessingMode_BUFFERED}}
	if _, err := call(first); err != nil {
		return 0, err
	}
	r, err := call(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}})
	if err != nil {
		return 0, err
	}
	if m := r.GetRequestBody().GetResponse().GetBodyMutation().GetBody(); m != nil {
		body = m
	}
	sent, err := url.ParseQuery(string(body))
	if err != nil {
		return 0, fmt.Errorf("the stamped body of %s: %w", paymentID(i), err)
	}
	stamp := sent.Get(stampMember)
	if stamp == "" {
		return 0, fmt.Errorf("the body Countersign let leave for %s carries no %s: %s", paymentID(i), stampMember, body)
	}
	// The rail's answer: the refund the stamped request created.
	refund := fmt.Sprintf(`{"id":"re_b%d","object":"refund","amount":%d,"currency":"usd","status":"succeeded","created":%d,`+
		`"payment_intent":%q,"charge":null,"reason":null,"metadata":{"countersign_sik":%q}}`,
		i, allowAmount, time.Now().Unix(), paymentID(i), stamp)
	if _, err := call(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(map[string]string{":status": "200", "content-type": "application/json", "content-length": strconv.Itoa(len(refund)),
			"request-id": "req_b" + strconv.Itoa(i)})}}}); err != nil {
		return 0, err
	}
	if _, err := call(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(refund), EndOfStream: true}}}); err != nil {
		return 0, err
	}
	took := time.Since(start)
	// Envoy half-closes when the exchange ends; the server ends the stream.
	if err := st.CloseSend(); err != nil {
		return 0, err
	}
	switch _, err := st.Recv(); {
	case err == nil:
		return 0, errors.New("ext_proc sent a message after its last answer")
	case !errors.Is(err, io.EOF):
		return 0, fmt.Errorf("ext_proc stream did not end cleanly: %w", err)
	}
	return took, nil
}

func headerMap(h map[string]string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for k, v := range h {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return m
}

// block is one BLOCK: a refund above the mandate's per-action maximum.
func (c *client) block(ctx context.Context, lane, i int, a agent) (timing, error) {
	form := "payment_intent=" + paymentID(i) + "&amount=" + strconv.Itoa(blockAmount)
	start := time.Now()
	resp, err := c.authz[lane%len(c.authz)].Check(ctx, checkRequest("block-"+strconv.Itoa(i), a, form))
	if err != nil {
		return timing{}, err
	}
	tm := timing{check: time.Since(start)}
	if code := codes.Code(resp.GetStatus().GetCode()); code != codes.PermissionDenied || resp.GetDeniedResponse() == nil {
		return tm, fmt.Errorf("refund above the maximum on %s: Check answered %s, want a PERMISSION_DENIED refusal", paymentID(i), code)
	}
	return tm, nil
}

// op runs operation number i (its payment) on lane (a caller).
type op func(ctx context.Context, lane, i int) (timing, error)

// cellResult is one measured cell.
type cellResult struct {
	ops            int
	elapsed        time.Duration
	check, whole   latencies
	errors         int
	firstErr       error
	perSecond      float64
	callers        int
	capped         bool // ended for want of payments, before its time
	hot            bool
	kind           string
	floorPerSecond float64
}

// drive runs op from callers goroutines for d (each finishes the operation
// it is in), over at most max operations numbered from first.
func drive(callers int, d time.Duration, first, max int, run op) cellResult {
	var next atomic.Int64
	checks := make([]time.Duration, max)
	wholes := make([]time.Duration, max)
	var errMu sync.Mutex
	res := cellResult{callers: callers}
	ctx := context.Background()
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for lane := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				k := int(next.Add(1) - 1)
				if k >= max {
					return
				}
				octx, cancel := context.WithTimeout(ctx, 30*time.Second)
				tm, err := run(octx, lane, first+k)
				cancel()
				checks[k], wholes[k] = tm.check, tm.exchange
				if err != nil {
					errMu.Lock()
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
					errMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.ops = min(int(next.Load()), max)
	res.check = summarise(checks[:res.ops])
	res.whole = summarise(wholes[:res.ops])
	res.perSecond = float64(res.ops) / res.elapsed.Seconds()
	return res
}
