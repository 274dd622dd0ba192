package mockrail

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stripe dialect: form-encoded parameters, Bearer secret key, errors shaped
// {"error":{"type","code","message","param"}}.

type stripeErrBody struct {
	Error stripeErrDetail `json:"error"`
}

type stripeErrDetail struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

func stripeErr(status int, typ, code, param, msg string) response {
	return response{status, mustJSON(stripeErrBody{stripeErrDetail{Type: typ, Code: code, Message: msg, Param: param}})}
}

func stripeRequestErr(status int, code, param, msg string) response {
	return stripeErr(status, "invalid_request_error", code, param, msg)
}

type stripePaymentIntent struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Amount           int64             `json:"amount"`
	AmountCapturable int64             `json:"amount_capturable"`
	AmountReceived   int64             `json:"amount_received"`
	AmountRefunded   int64             `json:"amount_refunded"` // mockrail extension; Stripe keeps it on the charge
	Currency         string            `json:"currency"`
	Status           string            `json:"status"`
	LatestCharge     any               `json:"latest_charge"`
	Created          int64             `json:"created"`
	Livemode         bool              `json:"livemode"`
	Metadata         map[string]string `json:"metadata"`
}

type stripeCharge struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Paid           bool              `json:"paid"`
	Refunded       bool              `json:"refunded"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	PaymentIntent  *string           `json:"payment_intent"`
	Created        int64             `json:"created"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
}

type stripeRefund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	PaymentIntent *string           `json:"payment_intent"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	Reason        *string           `json:"reason"`
	Metadata      map[string]string `json:"metadata"`
	Created       int64             `json:"created"`
}

type stripePayout struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Amount      int64             `json:"amount"`
	ArrivalDate int64             `json:"arrival_date"`
	Automatic   bool              `json:"automatic"`
	Currency    string            `json:"currency"`
	Description *string           `json:"description"`
	Destination *string           `json:"destination"`
	Method      string            `json:"method"`
	Status      string            `json:"status"`
	Type        string            `json:"type"`
	Metadata    map[string]string `json:"metadata"`
	Created     int64             `json:"created"`
	Livemode    bool              `json:"livemode"`
}

type stripeTransfer struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Amount            int64             `json:"amount"`
	AmountReversed    int64             `json:"amount_reversed"`
	Currency          string            `json:"currency"`
	Description       *string           `json:"description"`
	Destination       string            `json:"destination"`
	Reversed          bool              `json:"reversed"`
	SourceTransaction *string           `json:"source_transaction"`
	TransferGroup     *string           `json:"transfer_group"`
	Metadata          map[string]string `json:"metadata"`
	Created           int64             `json:"created"`
	Livemode          bool              `json:"livemode"`
}

type stripeListBody struct {
	Object  string            `json:"object"`
	URL     string            `json:"url"`
	HasMore bool              `json:"has_more"`
	Data    []json.RawMessage `json:"data"`
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func stripePaymentIntentOf(p *payment, expanded *stripeCharge) stripePaymentIntent {
	pi := stripePaymentIntent{
		ID: p.piID, Object: "payment_intent", Amount: p.amount, AmountRefunded: p.refunded,
		Currency: p.currency, Status: p.status, LatestCharge: p.chargeID,
		Created: p.created.Unix(), Metadata: map[string]string{},
	}
	if p.status == "succeeded" {
		pi.AmountReceived = p.received()
	}
	if p.status == "requires_capture" {
		pi.AmountCapturable = p.amount
	}
	if expanded != nil {
		pi.LatestCharge = expanded
	}
	return pi
}

func stripeChargeOf(p *payment) stripeCharge {
	ch := stripeCharge{
		ID: p.chargeID, Object: "charge", Amount: p.amount, AmountRefunded: p.refunded,
		Refunded: p.refunded == p.received(), Currency: p.currency, Status: p.status,
		PaymentIntent: strPtr(p.piID), Created: p.created.Unix(), Metadata: map[string]string{},
	}
	if p.status == "succeeded" {
		ch.Captured, ch.Paid, ch.AmountCaptured = true, true, p.received()
	}
	return ch
}

// params returns the request's parameters (body for POST, query for GET),
// refusing any not in allowed ("x[" allows every "x[…]"). On refusal the
// response is already sent.
func (c *call) stripeParams(allowed ...string) (url.Values, bool) {
	c.key = c.r.Header.Get("Idempotency-Key")
	if c.r.Method != http.MethodPost {
		c.key = "" // Stripe ignores keys on GET
	}
	if len(c.key) > 255 {
		c.fail(stripeRequestErr(http.StatusBadRequest, "idempotency_key_too_long", "",
			"Idempotency-Key must be at most 255 characters long."), OutcomeInvalid)
		return nil, false
	}
	form := c.r.URL.Query()
	if c.r.Method == http.MethodPost {
		var err error
		if form, err = url.ParseQuery(string(c.body)); err != nil {
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "", "Invalid request body: "+err.Error()), OutcomeInvalid)
			return nil, false
		}
	}
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
next:
	for _, k := range keys {
		for _, a := range allowed {
			if k == a || strings.HasSuffix(a, "[") && strings.HasPrefix(k, a) && strings.HasSuffix(k, "]") {
				continue next
			}
		}
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_unknown", k, "Received unknown parameter: "+k), OutcomeInvalid)
		return nil, false
	}
	return form, true
}

// stripeExpand returns the expand[] values, refusing any not in supported.
func (c *call) stripeExpand(form url.Values, supported ...string) ([]string, bool) {
	var out []string
	for k, vs := range form {
		if strings.HasPrefix(k, "expand[") {
			out = append(out, vs...)
		}
	}
	for _, v := range out {
		ok := false
		for _, s := range supported {
			ok = ok || v == s
		}
		if !ok {
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "expand",
				fmt.Sprintf("mockrail cannot expand %q here", v)), OutcomeInvalid)
			return nil, false
		}
	}
	return out, true
}

func (c *call) stripeMetadata(form url.Values) (map[string]string, bool) {
	md := map[string]string{}
	for k, vs := range form {
		if !strings.HasPrefix(k, "metadata[") {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(k, "metadata["), "]")
		switch {
		case name == "" || strings.ContainsAny(name, "[]"):
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", k, "Invalid metadata key: "+k), OutcomeInvalid)
			return nil, false
		case len(name) > 40:
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", k, "Metadata keys can be at most 40 characters."), OutcomeInvalid)
			return nil, false
		case len(vs[len(vs)-1]) > 500:
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", k, "Metadata values can be at most 500 characters."), OutcomeInvalid)
			return nil, false
		}
		md[name] = vs[len(vs)-1]
	}
	if len(md) > 50 {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "metadata", "Metadata can have at most 50 keys."), OutcomeInvalid)
		return nil, false
	}
	return md, true
}

// stripeAmount parses a positive integer amount; present reports whether it
// was sent at all.
func (c *call) stripeAmount(form url.Values, name string, required bool) (amount int64, present, ok bool) {
	if _, present = form[name]; !present {
		if required {
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_missing", name, "Missing required param: "+name+"."), OutcomeInvalid)
			return 0, false, false
		}
		return 0, false, true
	}
	v := form.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid_integer", name, "Invalid integer: "+v), OutcomeInvalid)
		return 0, true, false
	}
	if n < 1 {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid_integer", name, "This value must be greater than or equal to 1."), OutcomeInvalid)
		return 0, true, false
	}
	return n, true, true
}

func (c *call) stripeCurrency(form url.Values, required bool) (string, bool) {
	v := strings.ToLower(form.Get("currency"))
	if v == "" && !required {
		return "", true
	}
	if v == "" {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_missing", "currency", "Missing required param: currency."), OutcomeInvalid)
		return "", false
	}
	if !validCurrency(v) {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "currency", "Invalid currency: "+v), OutcomeInvalid)
		return "", false
	}
	return v, true
}

func stripeFingerprint(r *http.Request, form url.Values) string {
	return r.Method + " " + r.URL.Path + "\n" + form.Encode()
}

// --- payments -------------------------------------------------------------

func (s *Server) stripeGetPaymentIntent(c *call) {
	form, ok := c.stripeParams("expand[")
	if !ok {
		return
	}
	expand, ok := c.stripeExpand(form, "latest_charge")
	if !ok {
		return
	}
	id := c.r.PathValue("id")
	c.serve(op{class: classRead, kind: KindPayment, run: func(st *state, _ time.Time, _ time.Duration) result {
		p := st.lookupPayment(c.scope(), id)
		if p == nil || p.piID != id {
			return c.notFoundEntity("id", "payment_intent", id)
		}
		var ch *stripeCharge
		if len(expand) > 0 {
			v := stripeChargeOf(p)
			ch = &v
		}
		return result{resp: response{http.StatusOK, mustJSON(stripePaymentIntentOf(p, ch))}, outcome: OutcomeRead, entityID: id}
	}})
}

func (s *Server) stripeGetCharge(c *call) {
	if _, ok := c.stripeParams("expand["); !ok {
		return
	}
	id := c.r.PathValue("id")
	c.serve(op{class: classRead, kind: KindPayment, run: func(st *state, _ time.Time, _ time.Duration) result {
		p := st.lookupPayment(c.scope(), id)
		if p == nil || p.chargeID != id {
			return c.notFoundEntity("id", "charge", id)
		}
		return result{resp: response{http.StatusOK, mustJSON(stripeChargeOf(p))}, outcome: OutcomeRead, entityID: id}
	}})
}

// --- refunds --------------------------------------------------------------

var stripeRefundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

func (s *Server) stripeCreateRefund(c *call) {
	form, ok := c.stripeParams("payment_intent", "charge", "amount", "currency", "reason", "metadata[", "expand[",
		"instructions_email", "refund_application_fee", "reverse_transfer", "origin", "customer")
	if !ok {
		return
	}
	if _, ok := c.stripeExpand(form); !ok {
		return
	}
	piID, chID := form.Get("payment_intent"), form.Get("charge")
	if piID == "" && chID == "" {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_missing", "payment_intent",
			"One of the following params should be provided for this request: payment_intent or charge."), OutcomeInvalid)
		return
	}
	amount, hasAmount, ok := c.stripeAmount(form, "amount", false)
	if !ok {
		return
	}
	currency, ok := c.stripeCurrency(form, false)
	if !ok {
		return
	}
	reason := form.Get("reason")
	if reason != "" && !stripeRefundReasons[reason] {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "reason",
			"Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer"), OutcomeInvalid)
		return
	}
	md, ok := c.stripeMetadata(form)
	if !ok {
		return
	}
	c.serve(op{class: classCreate, kind: KindRefund, fingerprint: stripeFingerprint(c.r, form), run: func(st *state, now time.Time, _ time.Duration) result {
		var p *payment
		if piID != "" {
			if p = st.lookupPayment(c.scope(), piID); p == nil || p.piID != piID {
				return result{resp: stripeRequestErr(http.StatusNotFound, "resource_missing", "payment_intent", fmt.Sprintf("No such payment_intent: '%s'", piID)), outcome: OutcomeRejected}
			}
		}
		if chID != "" {
			q := st.lookupPayment(c.scope(), chID)
			if q == nil || q.chargeID != chID {
				return result{resp: stripeRequestErr(http.StatusNotFound, "resource_missing", "charge", fmt.Sprintf("No such charge: '%s'", chID)), outcome: OutcomeRejected}
			}
			if p != nil && p != q {
				return result{resp: stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "charge", fmt.Sprintf("Charge %s does not belong to PaymentIntent %s.", chID, piID)), outcome: OutcomeRejected}
			}
			p = q
		}
		if p.status != "succeeded" {
			return result{resp: stripeRequestErr(http.StatusBadRequest, "charge_not_refundable", "",
				fmt.Sprintf("This charge cannot be refunded because its status is %s.", p.status)), outcome: OutcomeRejected}
		}
		if currency != "" && currency != p.currency {
			return result{resp: stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "currency",
				fmt.Sprintf("Currency %s does not match the charge currency %s.", currency, p.currency)), outcome: OutcomeRejected}
		}
		left := p.refundable()
		if left == 0 {
			return result{resp: stripeRequestErr(http.StatusBadRequest, "charge_already_refunded", "",
				fmt.Sprintf("Charge %s has already been refunded.", p.chargeID)), outcome: OutcomeRejected}
		}
		amt := amount
		if !hasAmount {
			amt = left
		}
		if amt > left {
			return result{resp: stripeRequestErr(http.StatusBadRequest, "amount_too_large", "amount",
				fmt.Sprintf("Refund amount (%d %s) is greater than unrefunded amount on charge (%d %s)", amt, p.currency, left, p.currency)), outcome: OutcomeRejected}
		}
		id := s.newID("re_")
		body := mustJSON(stripeRefund{
			ID: id, Object: "refund", Amount: amt, Charge: p.chargeID, PaymentIntent: strPtr(p.piID),
			Currency: p.currency, Status: "succeeded", Reason: strPtr(reason), Metadata: md, Created: now.Unix(),
		})
		p.refunded += amt
		st.addEntity(&entity{rail: Stripe, account: c.scope(), kind: KindRefund, id: id, created: now, body: body, pay: p, status: "succeeded"},
			Effect{Time: now, Rail: Stripe, Account: c.acct.Name, ConnectedAccount: c.connected, Kind: KindRefund, EntityID: id, IdempotencyKey: c.key,
				Subject: p.id, Amount: amt, Currency: p.currency, Metadata: cloneMap(md)})
		return result{resp: response{http.StatusOK, body}, outcome: OutcomeApplied, entityID: id}
	}})
}

func (s *Server) stripeListRefunds(c *call) {
	form, ok := c.stripeParams("payment_intent", "charge", "limit", "starting_after", "ending_before", "created", "created[", "expand[")
	if !ok {
		return
	}
	lr, ok := c.stripeListParams(form)
	if !ok {
		return
	}
	piID, chID := form.Get("payment_intent"), form.Get("charge")
	c.serve(op{class: classList, run: func(st *state, now time.Time, lag time.Duration) result {
		return c.stripeListLocked(st, KindRefund, "/v1/refunds", lr, now, lag, func(e *entity) bool {
			return (piID == "" || e.pay.piID == piID) && (chID == "" || e.pay.chargeID == chID)
		})
	}})
}

func (s *Server) stripeGetEntity(kind Kind, object string) railHandler {
	return func(c *call) {
		if _, ok := c.stripeParams("expand["); !ok {
			return
		}
		id := c.r.PathValue("id")
		c.serve(op{class: classRead, kind: kind, run: func(st *state, _ time.Time, _ time.Duration) result {
			e := st.byID[id]
			if e == nil || e.account != c.scope() || e.kind != kind {
				return c.notFoundEntity("id", object, id)
			}
			return result{resp: response{http.StatusOK, e.body}, outcome: OutcomeRead, entityID: id}
		}})
	}
}

// --- payouts and transfers -------------------------------------------------

func (s *Server) stripeCreatePayout(c *call) {
	form, ok := c.stripeParams("amount", "currency", "description", "destination", "metadata[", "method",
		"source_type", "statement_descriptor", "expand[")
	if !ok {
		return
	}
	if _, ok := c.stripeExpand(form); !ok {
		return
	}
	amount, _, ok := c.stripeAmount(form, "amount", true)
	if !ok {
		return
	}
	currency, ok := c.stripeCurrency(form, true)
	if !ok {
		return
	}
	method := form.Get("method")
	if method == "" {
		method = "standard"
	}
	if method != "standard" && method != "instant" {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "method", "Invalid method: must be one of standard or instant"), OutcomeInvalid)
		return
	}
	md, ok := c.stripeMetadata(form)
	if !ok {
		return
	}
	dest, desc := form.Get("destination"), form.Get("description")
	c.serve(op{class: classCreate, kind: KindPayout, fingerprint: stripeFingerprint(c.r, form), run: func(st *state, now time.Time, _ time.Duration) result {
		id := s.newID("po_")
		body := mustJSON(stripePayout{
			ID: id, Object: "payout", Amount: amount, ArrivalDate: now.Add(48 * time.Hour).Unix(), Currency: currency,
			Description: strPtr(desc), Destination: strPtr(dest), Method: method, Status: "pending", Type: "bank_account",
			Metadata: md, Created: now.Unix(),
		})
		st.addEntity(&entity{rail: Stripe, account: c.scope(), kind: KindPayout, id: id, created: now, body: body, dest: dest, status: "pending"},
			Effect{Time: now, Rail: Stripe, Account: c.acct.Name, ConnectedAccount: c.connected, Kind: KindPayout, EntityID: id, IdempotencyKey: c.key,
				Subject: dest, Amount: amount, Currency: currency, Metadata: cloneMap(md)})
		return result{resp: response{http.StatusOK, body}, outcome: OutcomeApplied, entityID: id}
	}})
}

func (s *Server) stripeListPayouts(c *call) {
	form, ok := c.stripeParams("limit", "starting_after", "ending_before", "created", "created[", "destination", "status", "expand[")
	if !ok {
		return
	}
	lr, ok := c.stripeListParams(form)
	if !ok {
		return
	}
	dest, status := form.Get("destination"), form.Get("status")
	c.serve(op{class: classList, run: func(st *state, now time.Time, lag time.Duration) result {
		return c.stripeListLocked(st, KindPayout, "/v1/payouts", lr, now, lag, func(e *entity) bool {
			return (dest == "" || e.dest == dest) && (status == "" || e.status == status)
		})
	}})
}

func (s *Server) stripeCreateTransfer(c *call) {
	form, ok := c.stripeParams("amount", "currency", "destination", "description", "metadata[", "source_transaction",
		"transfer_group", "source_type", "expand[")
	if !ok {
		return
	}
	if _, ok := c.stripeExpand(form); !ok {
		return
	}
	amount, _, ok := c.stripeAmount(form, "amount", true)
	if !ok {
		return
	}
	currency, ok := c.stripeCurrency(form, true)
	if !ok {
		return
	}
	dest := form.Get("destination")
	if dest == "" {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_missing", "destination", "Missing required param: destination."), OutcomeInvalid)
		return
	}
	if !strings.HasPrefix(dest, "acct_") {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "destination", "Invalid destination: must be a connected account id (acct_…)"), OutcomeInvalid)
		return
	}
	md, ok := c.stripeMetadata(form)
	if !ok {
		return
	}
	desc, src, group := form.Get("description"), form.Get("source_transaction"), form.Get("transfer_group")
	c.serve(op{class: classCreate, kind: KindTransfer, fingerprint: stripeFingerprint(c.r, form), run: func(st *state, now time.Time, _ time.Duration) result {
		id := s.newID("tr_")
		body := mustJSON(stripeTransfer{
			ID: id, Object: "transfer", Amount: amount, Currency: currency, Description: strPtr(desc), Destination: dest,
			SourceTransaction: strPtr(src), TransferGroup: strPtr(group), Metadata: md, Created: now.Unix(),
		})
		st.addEntity(&entity{rail: Stripe, account: c.scope(), kind: KindTransfer, id: id, created: now, body: body, dest: dest, group: group},
			Effect{Time: now, Rail: Stripe, Account: c.acct.Name, ConnectedAccount: c.connected, Kind: KindTransfer, EntityID: id, IdempotencyKey: c.key,
				Subject: dest, Amount: amount, Currency: currency, Metadata: cloneMap(md)})
		return result{resp: response{http.StatusOK, body}, outcome: OutcomeApplied, entityID: id}
	}})
}

func (s *Server) stripeListTransfers(c *call) {
	form, ok := c.stripeParams("limit", "starting_after", "ending_before", "created", "created[", "destination", "transfer_group", "expand[")
	if !ok {
		return
	}
	lr, ok := c.stripeListParams(form)
	if !ok {
		return
	}
	dest, group := form.Get("destination"), form.Get("transfer_group")
	c.serve(op{class: classList, run: func(st *state, now time.Time, lag time.Duration) result {
		return c.stripeListLocked(st, KindTransfer, "/v1/transfers", lr, now, lag, func(e *entity) bool {
			return (dest == "" || e.dest == dest) && (group == "" || e.group == group)
		})
	}})
}

// --- lists ----------------------------------------------------------------

type stripeListReq struct {
	limit         int
	startingAfter string
	endingBefore  string
	created       func(unix int64) bool
}

func (c *call) stripeListParams(form url.Values) (stripeListReq, bool) {
	lr := stripeListReq{limit: 10, startingAfter: form.Get("starting_after"), endingBefore: form.Get("ending_before")}
	if _, ok := c.stripeExpand(form); !ok {
		return lr, false
	}
	if v := form.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid_integer", "limit",
				"Invalid limit: must be an integer between 1 and 100, got "+v), OutcomeInvalid)
			return lr, false
		}
		lr.limit = n
	}
	if lr.startingAfter != "" && lr.endingBefore != "" {
		c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid", "ending_before",
			"You may only specify one of these parameters: ending_before, starting_after."), OutcomeInvalid)
		return lr, false
	}
	var preds []func(int64) bool
	for k := range form {
		if k != "created" && !strings.HasPrefix(k, "created[") {
			continue
		}
		v := form.Get(k)
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_invalid_integer", k, "Invalid integer: "+v), OutcomeInvalid)
			return lr, false
		}
		switch k {
		case "created":
			preds = append(preds, func(u int64) bool { return u == t })
		case "created[gt]":
			preds = append(preds, func(u int64) bool { return u > t })
		case "created[gte]":
			preds = append(preds, func(u int64) bool { return u >= t })
		case "created[lt]":
			preds = append(preds, func(u int64) bool { return u < t })
		case "created[lte]":
			preds = append(preds, func(u int64) bool { return u <= t })
		default:
			c.fail(stripeRequestErr(http.StatusBadRequest, "parameter_unknown", k, "Received unknown parameter: "+k), OutcomeInvalid)
			return lr, false
		}
	}
	lr.created = func(u int64) bool {
		for _, p := range preds {
			if !p(u) {
				return false
			}
		}
		return true
	}
	return lr, true
}

// stripeListLocked pages newest first with Stripe's cursors: starting_after
// gives the objects older than the cursor, ending_before the ones just newer.
func (c *call) stripeListLocked(st *state, kind Kind, urlPath string, lr stripeListReq, now time.Time, lag time.Duration, keep func(*entity) bool) result {
	visible := visibleAt(now, lag)
	items := st.newest(c.scope(), kind, func(e *entity) bool {
		return keep(e) && visible(e) && lr.created(e.created.Unix())
	})
	cursor, param := lr.startingAfter, "starting_after"
	if lr.endingBefore != "" {
		cursor, param = lr.endingBefore, "ending_before"
	}
	if cursor != "" {
		ce := st.byID[cursor]
		if ce == nil || ce.account != c.scope() || ce.kind != kind {
			return result{resp: stripeRequestErr(http.StatusBadRequest, "resource_missing", param,
				fmt.Sprintf("No such %s: '%s'", kind, cursor)), outcome: OutcomeInvalid}
		}
		var sub []*entity
		for _, e := range items {
			if param == "starting_after" && e.seq < ce.seq || param == "ending_before" && e.seq > ce.seq {
				sub = append(sub, e)
			}
		}
		items = sub
	}
	body := stripeListBody{Object: "list", URL: urlPath, Data: []json.RawMessage{}}
	if len(items) > lr.limit {
		body.HasMore = true
		if param == "ending_before" && cursor != "" {
			items = items[len(items)-lr.limit:] // the ones closest to the cursor
		} else {
			items = items[:lr.limit]
		}
	}
	for _, e := range items {
		body.Data = append(body.Data, e.body)
	}
	return result{resp: response{http.StatusOK, mustJSON(body)}, outcome: OutcomeRead}
}
