package mockrail

import (
	"fmt"
	"strings"
	"time"
)

// Payment is a payment the rail knows, as created through AddPayment or
// POST /_mock/payments. For Stripe, ID is a PaymentIntent id (pi_…; its
// Charge id defaults to ch_ + the rest of the id) or a bare Charge id (ch_…).
// For Razorpay, ID is a payment id (pay_…). Account defaults to the rail's
// only account. Status defaults to "succeeded" (Stripe) or "captured"
// (Razorpay); only such payments can be refunded. AmountRefunded is output
// only.
type Payment struct {
	Rail    Rail   `json:"rail"`
	Account string `json:"account,omitempty"`
	// ConnectedAccount puts the payment on a connected (sub-merchant)
	// account of Account (Stripe acct_…, Razorpay acc_…), which then
	// exists: requests naming it in Stripe-Account / X-Razorpay-Account act
	// on its own payments, entities and idempotency keys.
	ConnectedAccount string `json:"connected_account,omitempty"`
	ID               string `json:"id"`
	ChargeID         string `json:"charge_id,omitempty"`
	Amount           int64  `json:"amount"`
	Currency         string `json:"currency"`
	Status           string `json:"status,omitempty"`
	AmountRefunded   int64  `json:"amount_refunded"`
}

type payment struct {
	rail      Rail
	account   string // state key: platform, or platform/connected
	platform  string
	connected string
	id        string // canonical: pi_ when there is one, else ch_; pay_ for Razorpay
	piID      string
	chargeID  string
	amount    int64
	refunded  int64
	captured  int64 // a partial capture's amount; 0: all of amount once succeeded
	currency  string
	status    string
	created   time.Time
}

func (p *payment) public() Payment {
	return Payment{
		Rail: p.rail, Account: p.platform, ConnectedAccount: p.connected, ID: p.id, ChargeID: p.chargeID,
		Amount: p.amount, Currency: p.currency, Status: p.status, AmountRefunded: p.refunded,
	}
}

func (p *payment) refundable() int64 { return p.received() - p.refunded }

// received is what the merchant holds of the payment: all of it, or what a
// partial capture took.
func (p *payment) received() int64 {
	if p.captured > 0 {
		return p.captured
	}
	return p.amount
}

// entity is a refund, payout, transfer or capture the rail created. Its
// body is frozen at creation, except a Stripe payout's metadata and status
// (update, cancel).
type entity struct {
	seq     int
	rail    Rail
	account string
	kind    Kind
	id      string
	created time.Time
	body    []byte
	pay     *payment // refunds

	// list filters
	dest          string // Stripe destination, RazorpayX fund_account_id
	group         string // Stripe transfer_group, RazorpayX reference_id
	accountNumber string // RazorpayX
	status        string
	mode          string
}

type idemKey struct {
	account string
	scope   string // "" for Stripe (one namespace), "refund"/"payout" for Razorpay
	key     string
}

type idemEntry struct {
	fingerprint string
	running     bool
	created     time.Time
	saved       response
	entityID    string
}

type payKey struct{ account, id string }

type state struct {
	seq         int
	payments    map[payKey]*payment // by every id of the payment
	paymentList []*payment
	entities    []*entity
	byID        map[string]*entity
	idem        map[idemKey]*idemEntry
	connected   map[string]bool // connected accounts' state keys
	effects     []Effect
	requests    []RequestRecord
}

func newState() *state {
	return &state{
		payments:  map[payKey]*payment{},
		byID:      map[string]*entity{},
		idem:      map[idemKey]*idemEntry{},
		connected: map[string]bool{},
	}
}

func (st *state) lookupPayment(account, id string) *payment {
	return st.payments[payKey{account, id}]
}

func (st *state) addEntity(e *entity, eff Effect) {
	st.seq++
	e.seq = st.seq
	st.entities = append(st.entities, e)
	st.byID[e.id] = e
	eff.Seq = len(st.effects) + 1
	st.effects = append(st.effects, eff)
}

func (st *state) record(rec RequestRecord) {
	rec.Seq = len(st.requests) + 1
	st.requests = append(st.requests, rec)
}

// newest returns the account's entities of kind that pass keep, newest first.
func (st *state) newest(account string, kind Kind, keep func(*entity) bool) []*entity {
	var out []*entity
	for i := len(st.entities) - 1; i >= 0; i-- {
		e := st.entities[i]
		if e.account == account && e.kind == kind && keep(e) {
			out = append(out, e)
		}
	}
	return out
}

func visibleAt(now time.Time, lag time.Duration) func(*entity) bool {
	return func(e *entity) bool { return lag <= 0 || !e.created.After(now.Add(-lag)) }
}

func (s *Server) addPaymentLocked(st *state, in Payment) (Payment, error) {
	if !in.Rail.valid() {
		return Payment{}, fmt.Errorf("payment %q: rail must be %q or %q", in.ID, Stripe, Razorpay)
	}
	if in.AmountRefunded != 0 {
		return Payment{}, fmt.Errorf("payment %q: amount_refunded is output only; create refunds through the rail", in.ID)
	}
	if in.Amount <= 0 {
		return Payment{}, fmt.Errorf("payment %q: amount must be a positive integer in minor units", in.ID)
	}
	if !validCurrency(in.Currency) {
		return Payment{}, fmt.Errorf("payment %q: currency must be a 3-letter ISO code, got %q", in.ID, in.Currency)
	}
	account, err := s.defaultAccountLocked(in.Rail, in.Account)
	if err != nil {
		return Payment{}, fmt.Errorf("payment %q: %w", in.ID, err)
	}
	p := &payment{rail: in.Rail, account: account, platform: account, connected: in.ConnectedAccount, id: in.ID, amount: in.Amount, status: in.Status, created: s.clock.Now()}
	if c := in.ConnectedAccount; c != "" {
		prefix := map[Rail]string{Stripe: "acct_", Razorpay: "acc_"}[in.Rail]
		if !strings.HasPrefix(c, prefix) || strings.ContainsAny(c, "/ ") {
			return Payment{}, fmt.Errorf("payment %q: a %s connected account id starts with %s", in.ID, in.Rail, prefix)
		}
		p.account = connectedScope(account, c)
		account = p.account
	}
	switch in.Rail {
	case Stripe:
		p.currency = strings.ToLower(in.Currency)
		if p.status == "" {
			p.status = "succeeded"
		}
		switch {
		case strings.HasPrefix(in.ID, "pi_"):
			p.piID = in.ID
			p.chargeID = in.ChargeID
			if p.chargeID == "" {
				p.chargeID = "ch_" + strings.TrimPrefix(in.ID, "pi_")
			}
			if !strings.HasPrefix(p.chargeID, "ch_") {
				return Payment{}, fmt.Errorf("payment %q: charge_id must start with ch_", in.ID)
			}
		case strings.HasPrefix(in.ID, "ch_"):
			if in.ChargeID != "" && in.ChargeID != in.ID {
				return Payment{}, fmt.Errorf("payment %q: a bare charge takes no charge_id", in.ID)
			}
			p.chargeID = in.ID
		default:
			return Payment{}, fmt.Errorf("payment %q: stripe payment ids start with pi_ or ch_", in.ID)
		}
	case Razorpay:
		p.currency = strings.ToUpper(in.Currency)
		if p.status == "" {
			p.status = "captured"
		}
		if !strings.HasPrefix(in.ID, "pay_") {
			return Payment{}, fmt.Errorf("payment %q: razorpay payment ids start with pay_", in.ID)
		}
		if in.ChargeID != "" {
			return Payment{}, fmt.Errorf("payment %q: razorpay payments take no charge_id", in.ID)
		}
	}
	for _, id := range []string{p.piID, p.chargeID, p.id} {
		if id != "" && st.lookupPayment(account, id) != nil {
			return Payment{}, fmt.Errorf("payment %q: id %q: %w", in.ID, id, errExists)
		}
	}
	for _, id := range []string{p.piID, p.chargeID, p.id} {
		if id != "" {
			st.payments[payKey{account, id}] = p
		}
	}
	st.paymentList = append(st.paymentList, p)
	if p.connected != "" {
		st.connected[p.account] = true
	}
	return p.public(), nil
}

// defaultAccountLocked resolves the account a payment belongs to.
func (s *Server) defaultAccountLocked(rail Rail, name string) (string, error) {
	if name != "" {
		for _, a := range s.accounts {
			if a.Name == name {
				if a.Rail != rail {
					return "", fmt.Errorf("account %q is a %s account", name, a.Rail)
				}
				return name, nil
			}
		}
		return "", fmt.Errorf("no account %q", name)
	}
	var found []string
	for _, a := range s.accounts {
		if a.Rail == rail {
			found = append(found, a.Name)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("account is required: %d %s accounts are configured", len(found), rail)
	}
	return found[0], nil
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for _, r := range strings.ToLower(c) {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return true
}
