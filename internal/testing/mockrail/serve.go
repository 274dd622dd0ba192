package mockrail

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// response is a status and a JSON body.
type response struct {
	status int
	body   []byte
}

// call is one rail request in flight.
type call struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	st    *state // the state the request started on (Reset swaps it)
	rail  Rail
	acct  *Account
	cred  string // masked presented credential
	key   string // idempotency key, "" if none
	reqID string
	body  []byte
	// connected is the connected (sub-merchant) account the request acts
	// on: Stripe-Account (acct_…) or X-Razorpay-Account (acc_…); "" for
	// the platform's own account.
	connected string
}

// scope is the state key of the account the request acts on: the platform
// account's name, or name/connected for a connected account.
func (c *call) scope() string {
	if c.connected == "" {
		return c.acct.Name
	}
	return connectedScope(c.acct.Name, c.connected)
}

func connectedScope(account, connected string) string { return account + "/" + connected }

// connectedHeader is each rail's header naming a connected account.
var connectedHeader = map[Rail]string{Stripe: "Stripe-Account", Razorpay: "X-Razorpay-Account"}

// railHandler serves one rail request for an authenticated account.
type railHandler func(c *call)

const maxBody = 1 << 20

// handle registers pattern with a handler per rail (nil: that rail has no
// such endpoint). The credential decides the rail.
func (s *Server) handle(m *http.ServeMux, pattern string, stripe, razorpay railHandler) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c := s.newCall(w, r)
		var h railHandler
		switch {
		case c.acct != nil && c.acct.Rail == Stripe:
			h = stripe
		case c.acct != nil && c.acct.Rail == Razorpay:
			h = razorpay
		}
		if h == nil {
			// No credential of a rail that serves this path: answer in the
			// shape of the rail the path belongs to.
			switch {
			case stripe == nil:
				c.rail = Razorpay
			case razorpay == nil:
				c.rail = Stripe
			}
			c.unauthorized()
			return
		}
		if c.connected = r.Header.Get(connectedHeader[c.acct.Rail]); c.connected != "" && !s.knowsConnected(c) {
			c.fail(c.noConnectedAccess(), OutcomeUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
			if err != nil {
				c.fail(c.invalid("", "could not read the request body: "+err.Error()), OutcomeInvalid)
				return
			}
			c.body = b
		}
		h(c)
	})
}

func (s *Server) newCall(w http.ResponseWriter, r *http.Request) *call {
	c := &call{s: s, w: w, r: r, reqID: s.newID("req_")}
	auth := r.Header.Get("Authorization")
	s.mu.Lock()
	c.st = s.st
	c.acct, c.cred, c.rail = s.authenticateLocked(auth)
	s.mu.Unlock()
	if c.rail == "" {
		// No usable credential: guess the dialect from the body encoding.
		c.rail = Stripe
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			c.rail = Razorpay
		}
	}
	return c
}

// authenticateLocked finds the account a credential opens. It returns the
// masked credential and the rail the credential's form suggests.
func (s *Server) authenticateLocked(h string) (*Account, string, Rail) {
	scheme, val, _ := strings.Cut(h, " ")
	switch strings.ToLower(scheme) {
	case "bearer":
		tok := strings.TrimSpace(val)
		for _, a := range s.accounts {
			if a.Rail == Stripe && a.SecretKey == tok {
				return a, MaskCredential(tok), Stripe
			}
		}
		return nil, MaskCredential(tok), Stripe
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(val))
		if err != nil {
			return nil, "****", ""
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		if pass == "" { // Stripe accepts its key as the Basic user name
			for _, a := range s.accounts {
				if a.Rail == Stripe && a.SecretKey == user {
					return a, MaskCredential(user), Stripe
				}
			}
			return nil, MaskCredential(user), Stripe
		}
		for _, a := range s.accounts {
			if a.Rail == Razorpay && a.KeyID == user && a.KeySecret == pass {
				return a, MaskCredential(user), Razorpay
			}
		}
		return nil, MaskCredential(user), Razorpay
	}
	return nil, "", ""
}

// record journals the request.
func (c *call) record(status int, out Outcome, entityID string, fault Profile) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.recordLocked(status, out, entityID, fault)
}

func (c *call) recordLocked(status int, out Outcome, entityID string, fault Profile) {
	rec := RequestRecord{
		Time: c.s.clock.Now(), Rail: c.rail, Credential: c.cred,
		Method: c.r.Method, Path: c.r.URL.Path, Query: c.r.URL.RawQuery,
		IdempotencyKey: c.key, Status: status, Outcome: out, EntityID: entityID, Fault: fault,
	}
	if c.acct != nil {
		rec.Account, rec.ConnectedAccount = c.acct.Name, c.connected
	}
	c.st.record(rec)
	c.s.log.Debug("mockrail request", "method", rec.Method, "path", rec.Path, "account", rec.Account,
		"idempotency_key", rec.IdempotencyKey, "status", status, "outcome", string(out), "fault", string(fault))
}

// write sends resp.
func (c *call) write(resp response, replayed bool) {
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	if c.rail == Stripe {
		h.Set("Request-Id", c.reqID)
		if c.key != "" {
			h.Set("Idempotency-Key", c.key)
		}
		if replayed {
			h.Set("Idempotent-Replayed", "true")
		}
	}
	if replayed {
		h.Set("X-Mockrail-Replayed", "true")
	}
	c.w.WriteHeader(resp.status)
	_, _ = c.w.Write(resp.body)
}

// fail answers and journals a request that never reached the apply stage.
func (c *call) fail(resp response, out Outcome) {
	c.record(resp.status, out, "", "")
	c.write(resp, false)
}

func (c *call) unauthorized() {
	var resp response
	if c.rail == Razorpay {
		resp = rzpErr(http.StatusUnauthorized, "BAD_REQUEST_ERROR", "", "The api key provided is invalid")
	} else if c.cred == "" {
		resp = stripeErr(http.StatusUnauthorized, "invalid_request_error", "", "",
			"You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').")
	} else {
		resp = stripeErr(http.StatusUnauthorized, "invalid_request_error", "", "", "Invalid API Key provided: "+c.cred)
	}
	c.acct = nil
	c.fail(resp, OutcomeUnauthorized)
}

// invalid is the rail's validation error.
// knowsConnected: a connected account exists once a payment names it.
func (s *Server) knowsConnected(c *call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.st.connected[c.scope()]
}

// noConnectedAccess is the rail's answer for a connected account the key
// cannot act on (Stripe: 403 account_invalid).
func (c *call) noConnectedAccess() response {
	if c.rail == Razorpay {
		return rzpErr(http.StatusUnauthorized, "BAD_REQUEST_ERROR", "", "The account "+c.connected+" is not linked to this partner key")
	}
	return stripeErr(http.StatusForbidden, "invalid_request_error", "account_invalid", "",
		fmt.Sprintf("The provided key '%s' does not have access to account '%s' (or that account does not exist). Application access may have been revoked.", c.cred, c.connected))
}

func (c *call) invalid(param, msg string) response {
	if c.rail == Razorpay {
		return rzpErr(http.StatusBadRequest, "BAD_REQUEST_ERROR", param, msg)
	}
	return stripeErr(http.StatusBadRequest, "invalid_request_error", "parameter_invalid", param, msg)
}

// op is what a rail request does once validated.
type op struct {
	class       reqClass
	kind        Kind   // for replay_other
	scope       string // idempotency scope (creates)
	fingerprint string // canonical request, for key mismatch detection
	// run computes the answer under the Server lock. For a list, lag is the
	// replica lag in force.
	run func(st *state, now time.Time, lag time.Duration) result
}

type result struct {
	resp     response
	outcome  Outcome
	entityID string
}

// serve runs op through idempotency, faults, hooks and the journal.
func (c *call) serve(o op) {
	s := c.s
	ctx := c.r.Context()
	var entry *idemEntry
	var ik idemKey
	s.mu.Lock()
	now := s.clock.Now()
	if o.class == classCreate && c.key != "" {
		ik = idemKey{account: c.scope(), scope: o.scope, key: c.key}
		e := c.st.idem[ik]
		if e != nil && !e.running && now.Sub(e.created) >= s.idemTTL {
			delete(c.st.idem, ik) // pruned: the key is new again
			e = nil
		}
		switch {
		case e != nil && e.fingerprint != o.fingerprint:
			c.recordLocked(http.StatusBadRequest, OutcomeKeyMismatch, "", "")
			s.mu.Unlock()
			c.write(c.keyMismatch(), false)
			return
		case e != nil && e.running:
			c.recordLocked(http.StatusConflict, OutcomeInProgress, "", "")
			s.mu.Unlock()
			c.write(c.keyInUse(), false)
			return
		case e != nil:
			c.recordLocked(e.saved.status, OutcomeReplayed, e.entityID, "")
			saved := e.saved
			s.mu.Unlock()
			c.write(saved, true)
			return
		}
		entry = &idemEntry{fingerprint: o.fingerprint, running: true, created: now}
		c.st.idem[ik] = entry
	}
	fault := s.takeFaultLocked(c.rail, c.r.Method, c.r.URL.Path, o.class)
	if fault.Profile == FaultResetBeforeApply {
		if entry != nil && c.st.idem[ik] == entry {
			delete(c.st.idem, ik)
		}
		c.recordLocked(0, OutcomeReset, "", fault.Profile)
		s.mu.Unlock()
		abortConn(c.w, true)
		return
	}
	if fault.Profile == FaultDeclineBeforeApply {
		declined := c.declined()
		if entry != nil {
			entry.running, entry.saved = false, declined
		}
		c.recordLocked(declined.status, OutcomeRejected, "", fault.Profile)
		s.mu.Unlock()
		c.write(declined, false)
		return
	}
	s.mu.Unlock()

	if fault.Profile == FaultSlow {
		select {
		case <-s.clock.After(fault.delay()):
		case <-s.closed:
		}
	}
	c.callHook(ctx, StageBeforeApply, fault.Profile)

	s.mu.Lock()
	var lag time.Duration
	if fault.Profile == FaultReplicaLag {
		lag = fault.delay()
	}
	res := o.run(c.st, s.clock.Now(), lag)
	saved := res.resp
	if fault.Profile == Fault5xxAfterApply {
		saved = c.serverError()
	}
	if entry != nil {
		entry.running = false
		entry.saved = saved
		entry.entityID = res.entityID
	}
	out := saved
	if fault.Profile == FaultReplayOther {
		if b, ok := c.otherBodyLocked(o.kind, res.entityID); ok {
			out = response{http.StatusOK, b}
		}
	}
	status := out.status
	if fault.Profile == FaultTimeoutAfterApply {
		status = 0
	}
	c.recordLocked(status, res.outcome, res.entityID, fault.Profile)
	s.mu.Unlock()

	c.callHook(ctx, StageAfterApply, fault.Profile)
	if fault.Profile == FaultTimeoutAfterApply {
		c.hang(fault.delay())
		return
	}
	c.write(out, false)
}

func (c *call) callHook(ctx context.Context, stage Stage, fault Profile) {
	if c.s.hook == nil {
		return
	}
	ev := HookEvent{
		Stage: stage, Rail: c.rail, Method: c.r.Method, Path: c.r.URL.Path,
		IdempotencyKey: c.key, Fault: fault,
	}
	if c.acct != nil {
		ev.Account = c.acct.Name
	}
	c.s.hook(ctx, ev)
}

// hang never answers: it waits for the client to give up, for d (if d > 0)
// or for Close, then closes the connection without a response.
func (c *call) hang(d time.Duration) {
	var timer <-chan time.Time
	if d > 0 {
		timer = c.s.clock.After(d)
	}
	select {
	case <-c.r.Context().Done():
	case <-timer:
	case <-c.s.closed:
	}
	abortConn(c.w, false)
}

// abortConn closes the client connection without a response; rst makes it a
// TCP reset. Where the connection cannot be hijacked (HTTP/2) the handler is
// aborted instead, which resets the stream.
func abortConn(w http.ResponseWriter, rst bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func (c *call) keyMismatch() response {
	if c.rail == Razorpay {
		return rzpErr(http.StatusBadRequest, "BAD_REQUEST_ERROR", "",
			"Different request with the same idempotency key has already been processed.")
	}
	return stripeErr(http.StatusBadRequest, "idempotency_error", "", "",
		fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", c.key))
}

func (c *call) keyInUse() response {
	if c.rail == Razorpay {
		return rzpErr(http.StatusConflict, "BAD_REQUEST_ERROR", "",
			"A request with the same idempotency key is still being processed. Retry after some time.")
	}
	return stripeErr(http.StatusConflict, "invalid_request_error", "idempotency_key_in_use", "",
		"There is currently another in-progress request using this Stripe API key with the same idempotency key. Please try again later.")
}

func (c *call) declined() response {
	if c.rail == Razorpay {
		return rzpErr(http.StatusBadRequest, "BAD_REQUEST_ERROR", "", "The refund could not be processed; it was declined.")
	}
	return stripeErr(http.StatusPaymentRequired, "card_error", "card_declined", "", "Your card was declined.")
}

func (c *call) serverError() response {
	if c.rail == Razorpay {
		return rzpErr(http.StatusInternalServerError, "SERVER_ERROR", "", "The server encountered an error. The incident has been reported to admins.")
	}
	return stripeErr(http.StatusInternalServerError, "api_error", "", "",
		"An unknown error occurred. Request id: "+c.reqID)
}

func (c *call) notFoundEntity(param, what, id string) result {
	if c.rail == Razorpay {
		return result{resp: rzpErr(http.StatusBadRequest, "BAD_REQUEST_ERROR", param, "The id provided does not exist"), outcome: OutcomeNotFound}
	}
	return result{
		resp:    stripeErr(http.StatusNotFound, "invalid_request_error", "resource_missing", param, fmt.Sprintf("No such %s: '%s'", what, id)),
		outcome: OutcomeNotFound,
	}
}

// otherBodyLocked finds the body of a different, earlier entity for
// replay_other: same kind first, then any kind, then a payment.
func (c *call) otherBodyLocked(kind Kind, exclude string) ([]byte, bool) {
	st := c.st
	acct := c.scope()
	if kind != KindPayment {
		for i := len(st.entities) - 1; i >= 0; i-- {
			if e := st.entities[i]; e.account == acct && e.kind == kind && e.id != exclude {
				return e.body, true
			}
		}
		for i := len(st.entities) - 1; i >= 0; i-- {
			if e := st.entities[i]; e.account == acct && e.id != exclude {
				return e.body, true
			}
		}
	}
	for i := len(st.paymentList) - 1; i >= 0; i-- {
		if p := st.paymentList[i]; p.account == acct && p.id != exclude && p.piID != exclude && p.chargeID != exclude {
			return c.s.renderPayment(p), true
		}
	}
	return nil, false
}

func (s *Server) renderPayment(p *payment) []byte {
	switch {
	case p.rail == Razorpay:
		return mustJSON(rzpPaymentOf(p))
	case p.piID != "":
		return mustJSON(stripePaymentIntentOf(p, nil))
	default:
		return mustJSON(stripeChargeOf(p))
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("mockrail: marshal %T: %v", v, err))
	}
	return b
}
