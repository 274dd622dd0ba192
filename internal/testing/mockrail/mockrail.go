package mockrail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Rail names a payment rail dialect.
type Rail string

// The rails mockrail speaks.
const (
	Stripe   Rail = "stripe"
	Razorpay Rail = "razorpay"
)

func (r Rail) valid() bool { return r == Stripe || r == Razorpay }

// Credentials of the accounts a Server gets when none is configured.
const (
	DefaultStripeAccount     = "stripe"
	DefaultStripeKey         = "sk_test_mockrail"
	DefaultRazorpayAccount   = "razorpay"
	DefaultRazorpayKeyID     = "rzp_test_mockrail"
	DefaultRazorpayKeySecret = "mockrail_secret"
)

// DefaultIdempotencyTTL is how long a saved idempotent response is kept
// (Stripe may prune keys after 24 h).
const DefaultIdempotencyTTL = 24 * time.Hour

// Account is one rail account and the only credential that opens it. Stripe
// accounts have a SecretKey; Razorpay accounts a KeyID and KeySecret.
type Account struct {
	Name      string `json:"name"`
	Rail      Rail   `json:"rail"`
	SecretKey string `json:"secret_key,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	KeySecret string `json:"key_secret,omitempty"`
}

func (a Account) validate() error {
	if a.Name == "" {
		return errors.New("account: name is required")
	}
	switch a.Rail {
	case Stripe:
		if a.SecretKey == "" {
			return fmt.Errorf("account %q: stripe accounts need secret_key", a.Name)
		}
		if a.KeyID != "" || a.KeySecret != "" {
			return fmt.Errorf("account %q: stripe accounts take secret_key, not key_id/key_secret", a.Name)
		}
	case Razorpay:
		if a.KeyID == "" || a.KeySecret == "" {
			return fmt.Errorf("account %q: razorpay accounts need key_id and key_secret", a.Name)
		}
		if a.SecretKey != "" {
			return fmt.Errorf("account %q: razorpay accounts take key_id/key_secret, not secret_key", a.Name)
		}
	default:
		return fmt.Errorf("account %q: rail must be %q or %q, got %q", a.Name, Stripe, Razorpay, a.Rail)
	}
	return nil
}

// Hook observes a rail request at a stage of its life. It runs on the
// request's goroutine without any lock held, so it may block (tests hold a
// request at StageBeforeApply to make concurrency deterministic); it should
// honour ctx, which ends when the client goes away.
type Hook func(ctx context.Context, ev HookEvent)

// Stage is a point in a rail request's life where the Hook runs.
type Stage string

// Hook stages.
const (
	// StageBeforeApply: authenticated, validated, idempotency key reserved
	// (a concurrent request with the same key now gets 409), fault chosen,
	// nothing applied yet.
	StageBeforeApply Stage = "before_apply"
	// StageAfterApply: the effect (if any) is applied and journaled and the
	// idempotent response saved; nothing has been written to the client.
	StageAfterApply Stage = "after_apply"
)

// HookEvent describes the request a Hook observes.
type HookEvent struct {
	Stage          Stage
	Rail           Rail
	Account        string
	Method         string
	Path           string
	IdempotencyKey string
	Fault          Profile // the fault applied to this request, "" if none
}

// Server is the mock rail. Create it with New; it is safe for concurrent use.
type Server struct {
	clock   Clock
	newID   func(prefix string) string
	hook    Hook
	log     *slog.Logger
	idemTTL time.Duration
	initial Seed // payments and faults that Reset restores
	mux     *http.ServeMux

	closeOnce sync.Once
	closed    chan struct{}

	mu       sync.Mutex
	accounts []*Account
	st       *state
	faults   []Fault
}

type options struct {
	clock Clock
	ids   func(prefix string) string
	hook  Hook
	log   *slog.Logger
	ttl   time.Duration
	seed  Seed
}

// Option configures New.
type Option func(*options)

// WithClock sets the clock (default: real time). Timestamps, replica lag,
// idempotency expiry and fault delays all read it; see ManualClock.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithIDs sets the id source (default: RandomIDs). It is called, possibly
// concurrently, with a prefix such as "re_", "po_", "tr_", "rfnd_", "pout_",
// "req_"; see SequentialIDs.
func WithIDs(f func(prefix string) string) Option { return func(o *options) { o.ids = f } }

// WithHook installs a Hook.
func WithHook(h Hook) Option { return func(o *options) { o.hook = h } }

// WithLogger sets the logger for per-request debug lines (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithIdempotencyTTL sets how long saved idempotent responses are kept.
func WithIdempotencyTTL(d time.Duration) Option { return func(o *options) { o.ttl = d } }

// WithSeed adds the accounts, payments and faults of s.
func WithSeed(s Seed) Option {
	return func(o *options) {
		o.seed.Accounts = append(o.seed.Accounts, s.Accounts...)
		o.seed.Payments = append(o.seed.Payments, s.Payments...)
		o.seed.Faults = append(o.seed.Faults, s.Faults...)
	}
}

// WithAccounts adds accounts. When no account is configured at all, New adds
// DefaultStripeAccount and DefaultRazorpayAccount with the default keys.
func WithAccounts(as ...Account) Option { return WithSeed(Seed{Accounts: as}) }

// WithPayments adds payments that exist from the start (and again after Reset).
func WithPayments(ps ...Payment) Option { return WithSeed(Seed{Payments: ps}) }

// WithFaults sets the fault rules in force from the start (and after Reset).
func WithFaults(fs ...Fault) Option { return WithSeed(Seed{Faults: fs}) }

// DefaultAccounts returns the accounts a Server gets when none is configured.
func DefaultAccounts() []Account {
	return []Account{
		{Name: DefaultStripeAccount, Rail: Stripe, SecretKey: DefaultStripeKey},
		{Name: DefaultRazorpayAccount, Rail: Razorpay, KeyID: DefaultRazorpayKeyID, KeySecret: DefaultRazorpayKeySecret},
	}
}

// New builds a Server.
func New(opts ...Option) (*Server, error) {
	o := options{clock: RealClock(), ttl: DefaultIdempotencyTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if o.ids == nil {
		o.ids = RandomIDs()
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.ttl <= 0 {
		return nil, errors.New("mockrail: idempotency TTL must be positive")
	}
	s := &Server{
		clock:   o.clock,
		newID:   o.ids,
		hook:    o.hook,
		log:     o.log,
		idemTTL: o.ttl,
		initial: Seed{Payments: o.seed.Payments, Faults: o.seed.Faults},
		closed:  make(chan struct{}),
	}
	accounts := o.seed.Accounts
	if len(accounts) == 0 {
		accounts = DefaultAccounts()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range accounts {
		if err := s.addAccountLocked(a); err != nil {
			return nil, fmt.Errorf("mockrail: %w", err)
		}
	}
	if err := s.resetLocked(); err != nil {
		return nil, fmt.Errorf("mockrail: %w", err)
	}
	s.mux = s.routes()
	return s, nil
}

// ServeHTTP serves the rail and the /_mock/ control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close releases every request hung by timeout_after_apply (their connections
// are closed without an answer). Call it before shutting the HTTP server
// down. The Server keeps serving; further hangs end at once.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// Reset forgets every payment, entity, saved idempotent response and journal
// entry, then restores the initial payments and fault rules. Accounts stay.
func (s *Server) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resetLocked()
}

func (s *Server) resetLocked() error {
	st := newState()
	for _, p := range s.initial.Payments {
		if _, err := s.addPaymentLocked(st, p); err != nil {
			return err
		}
	}
	faults, err := validateFaults(s.initial.Faults)
	if err != nil {
		return err
	}
	s.st = st
	s.faults = faults
	return nil
}

// AddAccount registers an account at runtime.
func (s *Server) AddAccount(a Account) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addAccountLocked(a)
}

func (s *Server) addAccountLocked(a Account) error {
	if err := a.validate(); err != nil {
		return err
	}
	for _, b := range s.accounts {
		if b.Name == a.Name {
			return fmt.Errorf("account %q: %w", a.Name, errExists)
		}
		if a.Rail == Stripe && b.SecretKey == a.SecretKey || a.Rail == Razorpay && b.KeyID == a.KeyID {
			return fmt.Errorf("account %q: its key is already used by account %q: %w", a.Name, b.Name, errExists)
		}
	}
	s.accounts = append(s.accounts, &a)
	return nil
}

// Accounts lists the configured accounts.
func (s *Server) Accounts() []Account {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Account, len(s.accounts))
	for i, a := range s.accounts {
		out[i] = *a
	}
	return out
}

// AddPayment creates a payment (Stripe PaymentIntent and its Charge, a bare
// Stripe Charge, or a Razorpay payment) and returns it as stored.
func (s *Server) AddPayment(p Payment) (Payment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addPaymentLocked(s.st, p)
}

// Payments lists every payment with its current refunded amount.
func (s *Server) Payments() []Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Payment, 0, len(s.st.paymentList))
	for _, p := range s.st.paymentList {
		out = append(out, p.public())
	}
	return out
}

// Payment finds a payment by account and any of its ids (pi_, ch_, pay_).
func (s *Server) Payment(account, id string) (Payment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.st.lookupPayment(account, id); p != nil {
		return p.public(), true
	}
	return Payment{}, false
}

// SetFaults replaces the fault rules. No rule, or a single FaultNone rule,
// turns faults off.
func (s *Server) SetFaults(fs ...Fault) error {
	v, err := validateFaults(fs)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = v
	return nil
}

// Faults returns the rules in force; Count is what remains of each.
func (s *Server) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Fault{}, s.faults...)
}

// Journal returns a copy of every effect applied and every rail request
// received since the start or the last Reset.
func (s *Server) Journal() Journal {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := Journal{
		Effects:  make([]Effect, len(s.st.effects)),
		Requests: append([]RequestRecord{}, s.st.requests...),
	}
	for i, e := range s.st.effects {
		e.Metadata = cloneMap(e.Metadata)
		j.Effects[i] = e
	}
	return j
}

var errExists = errors.New("already exists")

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// FailRefund turns a succeeded Stripe refund failed, as the rail reports
// one the customer's bank could not take (refund.failed): its amount is
// refundable on the payment again. It is how a test makes a payment's
// refundable balance grow by an outside event.
func (s *Server) FailRefund(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.st.byID[id]
	if e == nil || e.rail != Stripe || e.kind != KindRefund || e.pay == nil {
		return fmt.Errorf("mockrail: no Stripe refund %q", id)
	}
	var r stripeRefund
	if err := json.Unmarshal(e.body, &r); err != nil {
		return fmt.Errorf("mockrail: refund %s: %w", id, err)
	}
	if r.Status != "succeeded" {
		return fmt.Errorf("mockrail: refund %s is %s, not succeeded", id, r.Status)
	}
	r.Status = "failed"
	e.body, e.status = mustJSON(r), r.Status
	e.pay.refunded -= r.Amount
	return nil
}
