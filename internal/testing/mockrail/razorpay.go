package mockrail

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Razorpay dialect: JSON bodies, HTTP Basic key_id:key_secret, errors shaped
// {"error":{"code","description",…}}, offset paging with count/skip.

type rzpErrBody struct {
	Error rzpErrDetail `json:"error"`
}

type rzpErrDetail struct {
	Code        string         `json:"code"`
	Description string         `json:"description"`
	Source      string         `json:"source"`
	Step        string         `json:"step"`
	Reason      string         `json:"reason"`
	Metadata    map[string]any `json:"metadata"`
	Field       string         `json:"field,omitempty"`
}

func rzpErr(status int, code, field, desc string) response {
	return response{status, mustJSON(rzpErrBody{rzpErrDetail{
		Code: code, Description: desc, Source: "NA", Step: "NA", Reason: "NA", Metadata: map[string]any{}, Field: field,
	}})}
}

func rzpBadRequest(field, desc string) response {
	return rzpErr(http.StatusBadRequest, "BAD_REQUEST_ERROR", field, desc)
}

// rzpNotes are Razorpay notes. Razorpay writes empty notes as [] (not {}),
// and so does mockrail: a client must accept both.
type rzpNotes map[string]string

// MarshalJSON writes empty notes as [].
func (n rzpNotes) MarshalJSON() ([]byte, error) {
	if len(n) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(map[string]string(n))
}

type rzpPayment struct {
	ID             string   `json:"id"`
	Entity         string   `json:"entity"`
	Amount         int64    `json:"amount"`
	Currency       string   `json:"currency"`
	Status         string   `json:"status"`
	Method         string   `json:"method"`
	AmountRefunded int64    `json:"amount_refunded"`
	RefundStatus   *string  `json:"refund_status"`
	Captured       bool     `json:"captured"`
	Notes          rzpNotes `json:"notes"`
	CreatedAt      int64    `json:"created_at"`
}

type rzpRefund struct {
	ID             string         `json:"id"`
	Entity         string         `json:"entity"`
	Amount         int64          `json:"amount"`
	Currency       string         `json:"currency"`
	PaymentID      string         `json:"payment_id"`
	Notes          rzpNotes       `json:"notes"`
	Receipt        *string        `json:"receipt"`
	AcquirerData   map[string]any `json:"acquirer_data"`
	CreatedAt      int64          `json:"created_at"`
	BatchID        *string        `json:"batch_id"`
	Status         string         `json:"status"`
	SpeedProcessed string         `json:"speed_processed"`
	SpeedRequested string         `json:"speed_requested"`
}

type rzpPayout struct {
	ID            string   `json:"id"`
	Entity        string   `json:"entity"`
	FundAccountID string   `json:"fund_account_id"`
	Amount        int64    `json:"amount"`
	Currency      string   `json:"currency"`
	Notes         rzpNotes `json:"notes"`
	Fees          int64    `json:"fees"`
	Tax           int64    `json:"tax"`
	Status        string   `json:"status"`
	Purpose       string   `json:"purpose"`
	UTR           *string  `json:"utr"`
	Mode          string   `json:"mode"`
	ReferenceID   *string  `json:"reference_id"`
	Narration     *string  `json:"narration"`
	BatchID       *string  `json:"batch_id"`
	FailureReason *string  `json:"failure_reason"`
	CreatedAt     int64    `json:"created_at"`
}

type rzpCollection struct {
	Entity string            `json:"entity"`
	Count  int               `json:"count"`
	Items  []json.RawMessage `json:"items"`
}

// RazorpayX fees: a flat ₹5 plus 18% GST, in paise, whatever the mode.
const (
	rzpPayoutTax  = 90
	rzpPayoutFees = 500 + rzpPayoutTax
)

func rzpPaymentOf(p *payment) rzpPayment {
	var rs *string
	switch {
	case p.refunded == p.amount:
		rs = strPtr("full")
	case p.refunded > 0:
		rs = strPtr("partial")
	}
	st := p.status
	if p.refunded > 0 && p.status == "captured" && p.refunded == p.amount {
		st = "refunded"
	}
	return rzpPayment{
		ID: p.id, Entity: "payment", Amount: p.amount, Currency: p.currency, Status: st, Method: "card",
		AmountRefunded: p.refunded, RefundStatus: rs, Captured: p.status == "captured",
		CreatedAt: p.created.Unix(),
	}
}

var (
	rzpRefundKey = regexp.MustCompile(`^[A-Za-z0-9_-]{10,}$`)
	rzpPayoutKey = regexp.MustCompile(`^[A-Za-z0-9_-]{4,36}$`)
)

// rzpKey reads and checks an idempotency header.
func (c *call) rzpKey(header string, valid *regexp.Regexp, rule string) bool {
	c.key = c.r.Header.Get(header)
	if c.key != "" && !valid.MatchString(c.key) {
		c.fail(rzpBadRequest("", fmt.Sprintf("%s must be %s", header, rule)), OutcomeInvalid)
		return false
	}
	return true
}

// rzpBody decodes a JSON object body, refusing fields not in allowed. It
// returns the fields and the canonical form of the body.
func (c *call) rzpBody(allowed ...string) (map[string]json.RawMessage, string, bool) {
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(c.body)) > 0 {
		if err := json.Unmarshal(c.body, &fields); err != nil {
			c.fail(rzpBadRequest("", "The request body must be a JSON object: "+err.Error()), OutcomeInvalid)
			return nil, "", false
		}
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			c.fail(rzpBadRequest(k, k+" is/are not required and should not be sent"), OutcomeInvalid)
			return nil, "", false
		}
	}
	var canon any
	d := json.NewDecoder(bytes.NewReader(c.body))
	d.UseNumber()
	if err := d.Decode(&canon); err != nil {
		canon = map[string]any{}
	}
	return fields, c.r.Method + " " + c.r.URL.Path + "\n" + string(mustJSON(canon)), true
}

func (c *call) rzpAmount(fields map[string]json.RawMessage, required bool) (int64, bool, bool) {
	raw, present := fields["amount"]
	if !present || string(raw) == "null" {
		if required {
			c.fail(rzpBadRequest("amount", "The amount field is required."), OutcomeInvalid)
			return 0, false, false
		}
		return 0, false, true
	}
	v := string(raw)
	if s, err := strconv.Unquote(v); err == nil {
		v = s
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.fail(rzpBadRequest("amount", "The amount must be an integer."), OutcomeInvalid)
		return 0, true, false
	}
	if n < 1 {
		c.fail(rzpBadRequest("amount", "The amount must be at least 1."), OutcomeInvalid)
		return 0, true, false
	}
	return n, true, true
}

func (c *call) rzpString(fields map[string]json.RawMessage, name string, required bool) (string, bool) {
	raw, present := fields[name]
	if !present || string(raw) == "null" {
		if required {
			c.fail(rzpBadRequest(name, fmt.Sprintf("The %s field is required.", strings.ReplaceAll(name, "_", " "))), OutcomeInvalid)
			return "", false
		}
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		c.fail(rzpBadRequest(name, fmt.Sprintf("The %s must be a string.", name)), OutcomeInvalid)
		return "", false
	}
	if required && s == "" {
		c.fail(rzpBadRequest(name, fmt.Sprintf("The %s field is required.", strings.ReplaceAll(name, "_", " "))), OutcomeInvalid)
		return "", false
	}
	return s, true
}

// rzpNotesField parses notes: an object of at most 15 scalar values (an
// empty array is accepted as no notes). Non-string scalars keep their JSON
// text.
func (c *call) rzpNotesField(fields map[string]json.RawMessage) (rzpNotes, bool) {
	raw, present := fields["notes"]
	notes := rzpNotes{}
	if !present || string(raw) == "null" || string(bytes.TrimSpace(raw)) == "[]" {
		return notes, true
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		c.fail(rzpBadRequest("notes", "The notes must be an object of key-value pairs."), OutcomeInvalid)
		return nil, false
	}
	if len(m) > 15 {
		c.fail(rzpBadRequest("notes", "The notes may not have more than 15 items."), OutcomeInvalid)
		return nil, false
	}
	for k, v := range m {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			notes[k] = s
			continue
		}
		t := strings.TrimSpace(string(v))
		if t == "" || t[0] == '{' || t[0] == '[' {
			c.fail(rzpBadRequest("notes", "The notes values must be strings or numbers."), OutcomeInvalid)
			return nil, false
		}
		notes[k] = t
	}
	for k, v := range notes {
		if len(v) > 256 {
			c.fail(rzpBadRequest("notes", fmt.Sprintf("The notes value of %s may not be greater than 256 characters.", k)), OutcomeInvalid)
			return nil, false
		}
	}
	return notes, true
}

// --- payments and refunds -------------------------------------------------

func (s *Server) rzpGetPayment(c *call) {
	id := c.r.PathValue("id")
	c.serve(op{class: classRead, kind: KindPayment, run: func(st *state, _ time.Time, _ time.Duration) result {
		p := st.lookupPayment(c.scope(), id)
		if p == nil {
			return c.notFoundEntity("id", "payment", id)
		}
		return result{resp: response{http.StatusOK, mustJSON(rzpPaymentOf(p))}, outcome: OutcomeRead, entityID: id}
	}})
}

var rzpSpeeds = map[string]bool{"normal": true, "optimum": true}

func (s *Server) rzpCreateRefund(c *call) {
	if !c.rzpKey("X-Refund-Idempotency", rzpRefundKey, "at least 10 characters of A-Z, a-z, 0-9, _ or -") {
		return
	}
	fields, canon, ok := c.rzpBody("amount", "speed", "notes", "receipt", "currency")
	if !ok {
		return
	}
	amount, hasAmount, ok := c.rzpAmount(fields, false)
	if !ok {
		return
	}
	speed, ok := c.rzpString(fields, "speed", false)
	if !ok {
		return
	}
	if speed == "" {
		speed = "normal"
	}
	if !rzpSpeeds[speed] {
		c.fail(rzpBadRequest("speed", "The selected speed is invalid."), OutcomeInvalid)
		return
	}
	receipt, ok := c.rzpString(fields, "receipt", false)
	if !ok {
		return
	}
	currency, ok := c.rzpString(fields, "currency", false)
	if !ok {
		return
	}
	currency = strings.ToUpper(currency)
	notes, ok := c.rzpNotesField(fields)
	if !ok {
		return
	}
	payID := c.r.PathValue("id")
	c.serve(op{class: classCreate, kind: KindRefund, scope: "refund", fingerprint: canon, run: func(st *state, now time.Time, _ time.Duration) result {
		p := st.lookupPayment(c.scope(), payID)
		if p == nil {
			return result{resp: rzpBadRequest("payment_id", "The id provided does not exist"), outcome: OutcomeRejected}
		}
		if p.status != "captured" {
			return result{resp: rzpBadRequest("", fmt.Sprintf("Payment %s is %s; only captured payments can be refunded.", p.id, p.status)), outcome: OutcomeRejected}
		}
		if currency != "" && currency != p.currency {
			return result{resp: rzpBadRequest("currency", fmt.Sprintf("The currency %s does not match the payment currency %s.", currency, p.currency)), outcome: OutcomeRejected}
		}
		left := p.refundable()
		if left == 0 {
			return result{resp: rzpBadRequest("", "The payment has been fully refunded already"), outcome: OutcomeRejected}
		}
		amt := amount
		if !hasAmount {
			amt = left
		}
		if amt > left {
			return result{resp: rzpBadRequest("amount", fmt.Sprintf("The refund amount provided (%d) is greater than the amount still refundable (%d).", amt, left)), outcome: OutcomeRejected}
		}
		id := s.newID("rfnd_")
		body := mustJSON(rzpRefund{
			ID: id, Entity: "refund", Amount: amt, Currency: p.currency, PaymentID: p.id, Notes: notes,
			Receipt: strPtr(receipt), AcquirerData: map[string]any{"arn": nil}, CreatedAt: now.Unix(),
			Status: "processed", SpeedProcessed: "normal", SpeedRequested: speed,
		})
		p.refunded += amt
		st.addEntity(&entity{rail: Razorpay, account: c.scope(), kind: KindRefund, id: id, created: now, body: body, pay: p, status: "processed"},
			Effect{Time: now, Rail: Razorpay, Account: c.acct.Name, ConnectedAccount: c.connected, Kind: KindRefund, EntityID: id, IdempotencyKey: c.key,
				Subject: p.id, Amount: amt, Currency: p.currency, Metadata: cloneMap(notes)})
		return result{resp: response{http.StatusOK, body}, outcome: OutcomeApplied, entityID: id}
	}})
}

func (s *Server) rzpListRefunds(c *call) {
	lr, ok := c.rzpListParams()
	if !ok {
		return
	}
	payID := c.r.PathValue("id")
	c.serve(op{class: classList, run: func(st *state, now time.Time, lag time.Duration) result {
		p := st.lookupPayment(c.scope(), payID)
		if p == nil {
			return c.notFoundEntity("id", "payment", payID)
		}
		return c.rzpListLocked(st, KindRefund, lr, now, lag, func(e *entity) bool { return e.pay == p })
	}})
}

// rzpListAllRefunds is Razorpay's "fetch all refunds": the account's
// refunds of every payment, bounded by from/to like the other lists.
func (s *Server) rzpListAllRefunds(c *call) {
	lr, ok := c.rzpListParams()
	if !ok {
		return
	}
	c.serve(op{class: classList, run: func(st *state, now time.Time, lag time.Duration) result {
		return c.rzpListLocked(st, KindRefund, lr, now, lag, func(*entity) bool { return true })
	}})
}

func (s *Server) rzpGetEntity(kind Kind) railHandler {
	return func(c *call) {
		id, payID := c.r.PathValue("id"), ""
		if rid := c.r.PathValue("rid"); rid != "" {
			id, payID = rid, c.r.PathValue("id")
		}
		c.serve(op{class: classRead, kind: kind, run: func(st *state, _ time.Time, _ time.Duration) result {
			e := st.byID[id]
			if e == nil || e.account != c.scope() || e.kind != kind || payID != "" && e.pay.id != payID {
				return c.notFoundEntity("id", string(kind), id)
			}
			return result{resp: response{http.StatusOK, e.body}, outcome: OutcomeRead, entityID: id}
		}})
	}
}

// --- RazorpayX payouts ----------------------------------------------------

var rzpModes = map[string]bool{"NEFT": true, "RTGS": true, "IMPS": true, "UPI": true, "card": true, "amazonpay": true}

func (s *Server) rzpCreatePayout(c *call) {
	if !c.rzpKey("X-Payout-Idempotency", rzpPayoutKey, "4 to 36 characters of A-Z, a-z, 0-9, _ or -") {
		return
	}
	fields, canon, ok := c.rzpBody("account_number", "fund_account_id", "amount", "currency", "mode", "purpose",
		"queue_if_low_balance", "reference_id", "narration", "notes")
	if !ok {
		return
	}
	var acctNo, fa, currency, mode, purpose, ref, narration string
	for _, f := range []struct {
		name string
		dst  *string
		req  bool
	}{
		{"account_number", &acctNo, true}, {"fund_account_id", &fa, true}, {"currency", &currency, true},
		{"mode", &mode, true}, {"purpose", &purpose, true}, {"reference_id", &ref, false}, {"narration", &narration, false},
	} {
		if *f.dst, ok = c.rzpString(fields, f.name, f.req); !ok {
			return
		}
	}
	amount, _, ok := c.rzpAmount(fields, true)
	if !ok {
		return
	}
	if currency != "INR" {
		c.fail(rzpBadRequest("currency", "Currency is not supported"), OutcomeInvalid)
		return
	}
	if !rzpModes[mode] {
		c.fail(rzpBadRequest("mode", "Invalid mode: must be one of NEFT, RTGS, IMPS, UPI, card, amazonpay"), OutcomeInvalid)
		return
	}
	if !strings.HasPrefix(fa, "fa_") {
		c.fail(rzpBadRequest("fund_account_id", "The id provided does not exist"), OutcomeInvalid)
		return
	}
	if raw, ok := fields["queue_if_low_balance"]; ok && string(raw) != "true" && string(raw) != "false" {
		c.fail(rzpBadRequest("queue_if_low_balance", "The queue if low balance field must be true or false."), OutcomeInvalid)
		return
	}
	notes, ok := c.rzpNotesField(fields)
	if !ok {
		return
	}
	c.serve(op{class: classCreate, kind: KindPayout, scope: "payout", fingerprint: canon, run: func(st *state, now time.Time, _ time.Duration) result {
		id := s.newID("pout_")
		body := mustJSON(rzpPayout{
			ID: id, Entity: "payout", FundAccountID: fa, Amount: amount, Currency: currency, Notes: notes,
			Fees: rzpPayoutFees, Tax: rzpPayoutTax, Status: "processing", Purpose: purpose, Mode: mode,
			ReferenceID: strPtr(ref), Narration: strPtr(narration), CreatedAt: now.Unix(),
		})
		st.addEntity(&entity{rail: Razorpay, account: c.scope(), kind: KindPayout, id: id, created: now, body: body,
			dest: fa, group: ref, accountNumber: acctNo, status: "processing", mode: mode},
			Effect{Time: now, Rail: Razorpay, Account: c.acct.Name, ConnectedAccount: c.connected, Kind: KindPayout, EntityID: id, IdempotencyKey: c.key,
				Subject: fa, Amount: amount, Currency: currency, Metadata: cloneMap(notes)})
		return result{resp: response{http.StatusOK, body}, outcome: OutcomeApplied, entityID: id}
	}})
}

func (s *Server) rzpListPayouts(c *call) {
	lr, ok := c.rzpListParams("account_number", "fund_account_id", "reference_id", "mode", "status")
	if !ok {
		return
	}
	q := c.r.URL.Query()
	if q.Get("account_number") == "" {
		c.fail(rzpBadRequest("account_number", "The account number field is required."), OutcomeInvalid)
		return
	}
	c.serve(op{class: classList, run: func(st *state, now time.Time, lag time.Duration) result {
		return c.rzpListLocked(st, KindPayout, lr, now, lag, func(e *entity) bool {
			for param, v := range map[string]string{
				"account_number": e.accountNumber, "fund_account_id": e.dest, "reference_id": e.group,
				"mode": e.mode, "status": e.status,
			} {
				if want := q.Get(param); want != "" && want != v {
					return false
				}
			}
			return true
		})
	}})
}

// --- lists ----------------------------------------------------------------

type rzpListReq struct {
	count, skip int
	from, to    int64 // unix seconds, 0 = open
}

func (c *call) rzpListParams(filters ...string) (rzpListReq, bool) {
	lr := rzpListReq{count: 10}
	q := c.r.URL.Query()
	for k := range q {
		ok := k == "count" || k == "skip" || k == "from" || k == "to"
		for _, f := range filters {
			ok = ok || k == f
		}
		if !ok {
			c.fail(rzpBadRequest(k, k+" is/are not required and should not be sent"), OutcomeInvalid)
			return lr, false
		}
	}
	for _, p := range []struct {
		name     string
		min, max int64
		set      func(int64)
	}{
		{"count", 1, 100, func(v int64) { lr.count = int(v) }},
		{"skip", 0, 1 << 31, func(v int64) { lr.skip = int(v) }},
		{"from", 0, 1 << 40, func(v int64) { lr.from = v }},
		{"to", 0, 1 << 40, func(v int64) { lr.to = v }},
	} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < p.min || n > p.max {
			c.fail(rzpBadRequest(p.name, fmt.Sprintf("The %s must be an integer between %d and %d.", p.name, p.min, p.max)), OutcomeInvalid)
			return lr, false
		}
		p.set(n)
	}
	return lr, true
}

// rzpListLocked pages newest first by offset: an entity created between two
// page requests shifts every later page by one, as on the real rail.
func (c *call) rzpListLocked(st *state, kind Kind, lr rzpListReq, now time.Time, lag time.Duration, keep func(*entity) bool) result {
	visible := visibleAt(now, lag)
	items := st.newest(c.scope(), kind, func(e *entity) bool {
		u := e.created.Unix()
		return keep(e) && visible(e) && (lr.from == 0 || u >= lr.from) && (lr.to == 0 || u <= lr.to)
	})
	body := rzpCollection{Entity: "collection", Items: []json.RawMessage{}}
	if lr.skip < len(items) {
		items = items[lr.skip:]
		if len(items) > lr.count {
			items = items[:lr.count]
		}
		for _, e := range items {
			body.Items = append(body.Items, e.body)
		}
	}
	body.Count = len(body.Items)
	return result{resp: response{http.StatusOK, mustJSON(body)}, outcome: OutcomeRead}
}
