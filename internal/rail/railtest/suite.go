// Package railtest is the conformance suite every rail.Adapter runs, the
// fake rail it pages against, and a rail.Client over net/http.
//
// Each adapter's tests call [Run] with [Fixtures] that describe the rail in
// its own dialect (requests, answers, how it pages); the suite runs the same
// cases against every adapter, so "a same-amount entity without the stamp is
// not a match" or "a failed page is not exhaustion" is checked once, for all.
package railtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// ActionCase is a money-moving request and the Action Parse must return.
type ActionCase struct {
	Name string
	Req  rail.Request
	Want rail.Action
}

// RequestCase is a named request.
type RequestCase struct {
	Name string
	Req  rail.Request
}

// MalformedCase is a recognised request Parse must refuse with
// rail.ErrMalformed, naming Field in the error.
type MalformedCase struct {
	Name  string
	Req   rail.Request
	Field string
}

// ClassifyCase is a rail answer and its expected classification. For
// Applied, EntityID, FeeMinor and Stamp are checked too.
type ClassifyCase struct {
	Name         string
	Action       rail.Action
	Resp         rail.Response
	Want         rail.Outcome
	WantEntityID string
	WantFeeMinor int64
	WantStamp    string
}

// AmountVariants names the malformed amounts every adapter must refuse;
// Fixtures.MalformedAmounts holds one request per variant.
var AmountVariants = []string{
	"fraction",    // 10.5
	"exponent",    // 1e3
	"negative",    // -1
	"non_numeric", // abc
	"duplicate",   // the amount key twice
	"overflow",    // beyond 2^53-1 (and beyond int64)
}

// Fixtures describe one rail to the suite.
type Fixtures struct {
	Rail sik.Rail
	// Actions holds at least one request per action kind the rail supports.
	Actions []ActionCase
	// Reads are read-only requests (KindRead).
	Reads []RequestCase
	// Malformed are recognised requests with a bad field.
	Malformed []MalformedCase
	// MalformedAmounts holds a request per AmountVariants entry; each must
	// be refused with ErrMalformed naming "amount".
	MalformedAmounts map[string]rail.Request
	// Unrecognised are requests on the rail's host the adapter must refuse
	// with ErrUnrecognised (the suite adds a few of its own).
	Unrecognised []RequestCase
	// HeaderRule checks one idempotency header against the rail's rules.
	HeaderRule func(kind sik.Kind, name, value string) error
	// PinnedHeaders are headers Stamp sets besides the idempotency header,
	// with the one value each is pinned to (Stripe-Version).
	PinnedHeaders map[string]string
	// BodyField is the body stamp's field (sik.StripeBodyField, …).
	BodyField string
	// WithBodyStamp writes the body stamp into req as ext_proc would (the
	// body, and the content type when it writes a body where there was
	// none).
	WithBodyStamp func(req rail.Request, value string) (rail.Request, error)
	// Classify must cover every rail.Outcome; the suite adds the answers
	// that are ambiguous on every rail (transport errors, 5xx, bad 2xx).
	Classify []ClassifyCase
	// FindActions are searched for on a FakeRail serving List.
	FindActions []rail.Action
	// PageSize is the page size the adapter asks for (100 on both rails).
	PageSize int
	// List answers the FakeRail's list requests in the rail's dialect.
	List ListFunc
	// Listings, when set, is how many listings a search for a proves
	// absent on an empty rail reads (one page each): more than one where
	// the adapter reads the account's listing, unfiltered by the action's
	// subject, before it claims absence. Unset, one.
	Listings func(a rail.Action) int
	// ResolveAction, when set, is an action whose Resolve reads the rail;
	// the suite checks that a failed read is ErrReferent.
	ResolveAction *rail.Action
}

// testSIK is a valid SIK (32 base32 characters).
const testSIK sik.SIK = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// Run runs the conformance suite against newAdapter's adapters.
func Run(t *testing.T, newAdapter func() rail.Adapter, fx Fixtures) {
	t.Helper()
	if got := newAdapter().Rail(); got != fx.Rail {
		t.Fatalf("Rail() = %q, want %q", got, fx.Rail)
	}
	t.Run("Parse", func(t *testing.T) { runParse(t, newAdapter, fx) })
	t.Run("Stamp", func(t *testing.T) { runStamp(t, newAdapter, fx) })
	t.Run("Classify", func(t *testing.T) { runClassify(t, newAdapter, fx) })
	t.Run("Find", func(t *testing.T) { runFind(t, newAdapter, fx) })
	t.Run("Refusal", func(t *testing.T) { runRefusal(t, newAdapter) })
	if fx.ResolveAction != nil {
		t.Run("Resolve", func(t *testing.T) { runResolve(t, newAdapter, *fx.ResolveAction) })
	}
}

func runParse(t *testing.T, newAdapter func() rail.Adapter, fx Fixtures) {
	if len(fx.Actions) == 0 {
		t.Fatal("fixtures have no action requests")
	}
	for _, tc := range fx.Actions {
		t.Run("action/"+tc.Name, func(t *testing.T) {
			ad := newAdapter()
			got, err := ad.Parse(tc.Req)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Kind != rail.KindAction {
				t.Fatalf("Kind = %v, want KindAction", got.Kind)
			}
			if !EqualAction(got.Action, tc.Want) {
				t.Fatalf("Action =\n  %+v\nwant\n  %+v", got.Action, tc.Want)
			}
			if err := CheckParsed(got, nil); err != nil {
				t.Fatal(err)
			}
			// Round trip: the stamped request (Countersign's header and
			// body stamp, the caller's own random key) means the same.
			for _, gen := range []uint32{0, 3} {
				st, err := ad.Stamp(got.Action, testSIK, gen)
				if err != nil {
					t.Fatalf("Stamp(gen %d): %v", gen, err)
				}
				req := tc.Req
				req.Headers = maps.Clone(tc.Req.Headers)
				if req.Headers == nil {
					req.Headers = map[string]string{}
				}
				req.Headers["idempotency-key"] = "caller-uuid-0f8fad5b-d9cb-469f"
				for k, v := range st.Headers {
					req.Headers[strings.ToLower(k)] = v
				}
				if req, err = fx.WithBodyStamp(req, st.BodyValue); err != nil {
					t.Fatalf("WithBodyStamp: %v", err)
				}
				again, err := ad.Parse(req)
				if err != nil {
					t.Fatalf("Parse(stamped gen %d): %v\nbody %s", gen, err, req.Body)
				}
				if !EqualAction(again.Action, got.Action) {
					t.Fatalf("stamping changed the action (gen %d):\n  %+v\nwant\n  %+v", gen, again.Action, got.Action)
				}
			}
		})
	}
	for _, tc := range fx.Reads {
		t.Run("read/"+tc.Name, func(t *testing.T) {
			got, err := newAdapter().Parse(tc.Req)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Kind != rail.KindRead || !EqualAction(got.Action, rail.Action{}) {
				t.Fatalf("Parse = %+v, want KindRead with no action", got)
			}
		})
	}
	for _, tc := range fx.Malformed {
		t.Run("malformed/"+tc.Name, func(t *testing.T) {
			checkMalformed(t, newAdapter(), tc.Req, tc.Field)
		})
	}
	for _, v := range AmountVariants {
		t.Run("malformed_amount/"+v, func(t *testing.T) {
			req, ok := fx.MalformedAmounts[v]
			if !ok {
				t.Fatalf("fixtures have no %q malformed amount", v)
			}
			checkMalformed(t, newAdapter(), req, "amount")
		})
	}
	unknown := append(slices.Clone(fx.Unrecognised),
		RequestCase{"post_unknown_path", rail.Request{Method: http.MethodPost, Path: "/v1/definitely_not_an_endpoint", Body: []byte("{}")}},
		RequestCase{"get_unknown_path", rail.Request{Method: http.MethodGet, Path: "/v1/definitely_not_an_endpoint"}},
		RequestCase{"empty_path", rail.Request{Method: http.MethodPost}},
		RequestCase{"root", rail.Request{Method: http.MethodGet, Path: "/"}},
		RequestCase{"action_path_with_put", withMethod(fx.Actions[0].Req, http.MethodPut)},
		RequestCase{"action_path_with_delete", withMethod(fx.Actions[0].Req, http.MethodDelete)},
		RequestCase{"action_path_dot_segment", withPath(fx.Actions[0].Req, "/v1/x/.."+fx.Actions[0].Req.Path)},
		RequestCase{"action_path_trailing_slash", withPath(fx.Actions[0].Req, fx.Actions[0].Req.Path+"/")},
		RequestCase{"action_path_upper_case", withPath(fx.Actions[0].Req, strings.ToUpper(fx.Actions[0].Req.Path))},
	)
	for _, tc := range unknown {
		t.Run("unrecognised/"+tc.Name, func(t *testing.T) {
			_, err := newAdapter().Parse(tc.Req)
			if !errors.Is(err, rail.ErrUnrecognised) {
				t.Fatalf("Parse(%s %s) error = %v, want ErrUnrecognised", tc.Req.Method, tc.Req.Path, err)
			}
		})
	}
	// Every rail refuses, by name, an action that asks Envoy to send it
	// again or cut it short (rail.HeaderPolicy's x-envoy-* namespace), and
	// takes one that carries only ext_authz's own flag.
	for _, tc := range fx.Actions {
		t.Run("envoy_control/"+tc.Name, func(t *testing.T) {
			for _, h := range []string{"x-envoy-retry-on", "x-envoy-hedge-on-per-try-timeout", "x-envoy-upstream-stream-duration-ms"} {
				_, err := newAdapter().Parse(withHeader(tc.Req, h, "1"))
				var rh *rail.RefusedHeader
				if !errors.Is(err, rail.ErrUnrecognised) || !errors.As(err, &rh) || rh.Name != h {
					t.Errorf("Parse with %s = %v, want a RefusedHeader naming it", h, err)
				}
			}
			if _, err := newAdapter().Parse(withHeader(tc.Req, "x-envoy-auth-partial-body", "false")); err != nil {
				t.Errorf("Parse with ext_authz's partial-body flag: %v", err)
			}
		})
	}
}

// withHeader is r with header name set to v (r's map is not changed).
func withHeader(r rail.Request, name, v string) rail.Request {
	r.Headers = maps.Clone(r.Headers)
	if r.Headers == nil {
		r.Headers = map[string]string{}
	}
	r.Headers[name] = v
	return r
}

func checkMalformed(t *testing.T, ad rail.Adapter, req rail.Request, field string) {
	t.Helper()
	got, err := ad.Parse(req)
	if !errors.Is(err, rail.ErrMalformed) {
		t.Fatalf("Parse(%s %s %q) = %+v, %v; want ErrMalformed", req.Method, req.Path, req.Body, got, err)
	}
	if !strings.Contains(err.Error(), field) {
		t.Fatalf("error %q does not name the field %q", err, field)
	}
}

func withMethod(r rail.Request, m string) rail.Request { r.Method = m; return r }
func withPath(r rail.Request, p string) rail.Request   { r.Path = p; return r }

// EqualAction reports whether a and b are the same action, comparing
// amounts by value and treating nil and empty Extra alike.
func EqualAction(a, b rail.Action) bool {
	if len(a.Extra) == 0 && len(b.Extra) == 0 {
		a.Extra, b.Extra = nil, nil
	}
	if (a.AmountMinor == nil) != (b.AmountMinor == nil) || a.AmountMinor != nil && *a.AmountMinor != *b.AmountMinor {
		return false
	}
	a.AmountMinor, b.AmountMinor = nil, nil
	// Labels are not the action (they are out of the key); each adapter's
	// own tests check them, and CheckParsed checks their shape.
	a.Labels, b.Labels = nil, nil
	// Nor is what was sent under the stamp key (a stamped body's stamp).
	a.SentStamp, b.SentStamp = "", ""
	return reflect.DeepEqual(a, b)
}

// CheckParsed states what every successful Parse guarantees, for fuzz
// targets: an error wraps ErrUnrecognised or ErrMalformed; an action has a
// known kind, a clean non-empty subject, a non-negative amount when set and
// an upper-case ISO 4217 currency when set.
func CheckParsed(p rail.Parsed, err error) error {
	if err != nil {
		if !errors.Is(err, rail.ErrUnrecognised) && !errors.Is(err, rail.ErrMalformed) {
			return fmt.Errorf("error %q wraps neither ErrUnrecognised nor ErrMalformed", err.Error())
		}
		return nil
	}
	switch p.Kind {
	case rail.KindRead:
		if !EqualAction(p.Action, rail.Action{}) {
			return fmt.Errorf("read carries an action: %+v", p.Action)
		}
		return nil
	case rail.KindAction:
	default:
		return fmt.Errorf("unknown Kind %d", p.Kind)
	}
	a := p.Action
	switch a.Kind {
	case sik.KindRefund, sik.KindPayout, sik.KindTransfer:
	default:
		return fmt.Errorf("unknown action kind %q", a.Kind)
	}
	if a.Subject == "" || strings.TrimSpace(a.Subject) != a.Subject {
		return fmt.Errorf("subject %q is empty or padded", a.Subject)
	}
	if a.AmountMinor != nil && (*a.AmountMinor < 0 || *a.AmountMinor > 1<<53-1) {
		return fmt.Errorf("amount %d out of range", *a.AmountMinor)
	}
	if a.Currency != "" {
		if len(a.Currency) != 3 || strings.ToUpper(a.Currency) != a.Currency || strings.Trim(a.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return fmt.Errorf("currency %q is not three upper-case letters", a.Currency)
		}
	}
	// Labels name members, never Countersign's stamp (ext_proc writes it),
	// and their canonical form is what an approval records.
	for name, l := range a.Labels {
		if name == "" || isStampLabel(name) {
			return fmt.Errorf("label %q is empty or is the stamp", name)
		}
		if !utf8.ValidString(name) || !utf8.ValidString(l.Value) {
			return fmt.Errorf("label %q is not valid UTF-8", name)
		}
	}
	if c := rail.CanonicalLabels(a.Labels); !strings.HasPrefix(c, "{") {
		return fmt.Errorf("canonical labels %q", c)
	}
	// The action must be keyable: sik.Key refuses what the ledger cannot hold.
	amount := int64(0)
	if a.AmountMinor != nil {
		amount = *a.AmountMinor
	}
	cur := a.Currency
	if cur == "" {
		cur = "XXX"
	}
	if _, err := sik.Key(sik.Action{V: sik.Version, RailAccount: "acct", Action: string(a.Kind), Subject: a.Subject,
		AmountMinor: amount, Currency: cur, Extra: a.Extra, Distinct: a.Distinct}); err != nil {
		return fmt.Errorf("parsed action cannot be keyed: %w", err)
	}
	return nil
}

func runStamp(t *testing.T, newAdapter func() rail.Adapter, fx Fixtures) {
	kinds := map[sik.Kind]rail.Action{}
	for _, tc := range fx.Actions {
		kinds[tc.Want.Kind] = tc.Want
	}
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		a := kinds[kind]
		t.Run(string(kind), func(t *testing.T) {
			ad := newAdapter()
			seen := map[string]uint32{}
			for _, gen := range []uint32{0, 1, 9, 35, 36, 1295, sik.MaxGeneration} {
				st, err := ad.Stamp(a, testSIK, gen)
				if err != nil {
					t.Fatalf("Stamp(gen %d): %v", gen, err)
				}
				want, err := sik.Stamp(testSIK, gen)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Headers) != 1+len(fx.PinnedHeaders) {
					t.Fatalf("gen %d: %d headers %v, want exactly one idempotency header and the pins %v", gen, len(st.Headers), st.Headers, fx.PinnedHeaders)
				}
				for name, value := range st.Headers {
					if pin, ok := fx.PinnedHeaders[name]; ok {
						if value != pin {
							t.Fatalf("gen %d: pinned header %s = %q, want %q", gen, name, value, pin)
						}
						continue
					}
					if value != want {
						t.Fatalf("gen %d: header %s = %q, want %q", gen, name, value, want)
					}
					if err := fx.HeaderRule(kind, name, value); err != nil {
						t.Fatalf("gen %d: header breaks the rail's key rules: %v", gen, err)
					}
				}
				if st.BodyField != fx.BodyField || st.BodyValue != want {
					t.Fatalf("gen %d: body stamp %s=%q, want %s=%q", gen, st.BodyField, st.BodyValue, fx.BodyField, want)
				}
				k, g, err := sik.ParseStamp(st.BodyValue)
				if err != nil || k != testSIK || g != gen {
					t.Fatalf("gen %d: ParseStamp(%q) = %q, %d, %v", gen, st.BodyValue, k, g, err)
				}
				if prev, dup := seen[want]; dup {
					t.Fatalf("generations %d and %d share stamp %q", prev, gen, want)
				}
				seen[want] = gen
			}
			if _, err := ad.Stamp(a, testSIK, sik.MaxGeneration+1); err == nil {
				t.Fatal("Stamp accepted a generation beyond MaxGeneration")
			}
			if _, err := ad.Stamp(a, "not-a-sik", 0); err == nil {
				t.Fatal("Stamp accepted an invalid SIK")
			}
		})
	}
}

func runClassify(t *testing.T, newAdapter func() rail.Adapter, fx Fixtures) {
	covered := map[rail.Outcome]bool{}
	for _, tc := range fx.Classify {
		covered[tc.Want] = true
	}
	for _, o := range []rail.Outcome{rail.Applied, rail.InProgress, rail.FingerprintMismatch, rail.Rejected, rail.Ambiguous} {
		if !covered[o] {
			t.Errorf("fixtures have no Classify case for %v", o)
		}
	}
	a := fx.Actions[0].Want
	railErr := []byte(`{"error":{"message":"boom","description":"boom"}}`)
	cases := append(slices.Clone(fx.Classify),
		ClassifyCase{Name: "universal/transport_timeout", Action: a, Resp: rail.Response{TransportErr: context.DeadlineExceeded}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/transport_error_with_status", Action: a, Resp: rail.Response{Status: 200, Body: []byte(`{"id":"x"}`), TransportErr: errors.New("connection reset by peer")}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/no_status", Action: a, Resp: rail.Response{}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/500", Action: a, Resp: rail.Response{Status: 500, Body: railErr}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/502_html", Action: a, Resp: rail.Response{Status: 502, Body: []byte("<html>bad gateway</html>")}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/503", Action: a, Resp: rail.Response{Status: 503}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/504", Action: a, Resp: rail.Response{Status: 504, Body: railErr}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/2xx_not_json", Action: a, Resp: rail.Response{Status: 200, Body: []byte("not json")}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/2xx_empty", Action: a, Resp: rail.Response{Status: 200}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/2xx_no_id", Action: a, Resp: rail.Response{Status: 200, Body: []byte(`{}`)}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/2xx_array", Action: a, Resp: rail.Response{Status: 200, Body: []byte(`[{"id":"x"}]`)}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/2xx_truncated", Action: a, Resp: rail.Response{Status: 200, Body: []byte(`{"id":"x","amount":1`)}, Want: rail.Ambiguous},
		ClassifyCase{Name: "universal/3xx", Action: a, Resp: rail.Response{Status: 302}, Want: rail.Ambiguous},
	)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			got := newAdapter().Classify(tc.Action, tc.Resp)
			if got.Outcome != tc.Want {
				t.Fatalf("Outcome = %v (%q), want %v", got.Outcome, got.Reason, tc.Want)
			}
			if got.Reason == "" {
				t.Error("Reason is empty")
			}
			if tc.Want != rail.Applied {
				if got.EntityID != "" || got.FeeMinor != 0 {
					t.Errorf("%v carries entity %q fee %d", got.Outcome, got.EntityID, got.FeeMinor)
				}
				return
			}
			if got.EntityID == "" || got.EntityID != tc.WantEntityID {
				t.Errorf("EntityID = %q, want %q", got.EntityID, tc.WantEntityID)
			}
			if got.FeeMinor != tc.WantFeeMinor {
				t.Errorf("FeeMinor = %d, want %d", got.FeeMinor, tc.WantFeeMinor)
			}
			if got.Stamp != tc.WantStamp {
				t.Errorf("Stamp = %q, want %q", got.Stamp, tc.WantStamp)
			}
		})
	}
}

// errClient is a rail.Client whose every call fails in transport.
type errClient struct{}

func (errClient) Do(context.Context, string, string, map[string]string, []byte) (*http.Response, error) {
	return nil, errors.New("connection reset by peer")
}

func runFind(t *testing.T, newAdapter func() rail.Adapter, fx Fixtures) {
	if len(fx.FindActions) == 0 || fx.PageSize <= 0 || fx.List == nil {
		t.Fatal("fixtures need FindActions, PageSize and List")
	}
	stamp, err := sik.Stamp(testSIK, 0)
	if err != nil {
		t.Fatal(err)
	}
	otherGen, _ := sik.Stamp(testSIK, 1)
	otherSIK, _ := sik.Stamp("BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", 0)
	p := fx.PageSize
	now := time.Unix(1_760_000_000, 0)
	since := now.Add(-24 * time.Hour)

	for _, a := range fx.FindActions {
		amount := int64(4242)
		if a.AmountMinor != nil {
			amount = *a.AmountMinor
		}
		cur := a.Currency
		if cur == "" {
			cur = "USD"
		}
		// entities returns n unstamped entities (newest first), with
		// decoys near the head: the same amount without a stamp, another
		// generation's stamp, another SIK's stamp.
		entities := func(prefix string, n int) []Listed {
			out := make([]Listed, n)
			for i := range out {
				out[i] = Listed{
					ID: fmt.Sprintf("%s%05d", prefix, i), AmountMinor: 1000 + int64(i), Currency: cur,
					Status: "succeeded", Created: now.Add(-time.Duration(i) * time.Second),
				}
			}
			if n > 10 {
				out[3].AmountMinor = amount
				out[7].AmountMinor, out[7].Stamp = amount, otherGen
				out[9].AmountMinor, out[9].Stamp = amount, otherSIK
			}
			return out
		}
		withTarget := func(items []Listed, at int) ([]Listed, Listed) {
			items[at].Stamp, items[at].AmountMinor = stamp, amount
			return items, items[at]
		}
		find := func(t *testing.T, fake *FakeRail) (rail.Finding, error) {
			t.Helper()
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f, err := newAdapter().Find(ctx, NewClient(srv.URL, "Bearer test", srv.Client()), a, stamp, since)
			if err == nil && f.Pages != fake.Calls() {
				t.Errorf("Pages = %d, but the rail served %d list requests", f.Pages, fake.Calls())
			}
			return f, err
		}
		wantMatch := func(t *testing.T, f rail.Finding, err error, want Listed) {
			t.Helper()
			if err != nil {
				t.Fatalf("Find: %v", err)
			}
			if f.Match == nil {
				t.Fatalf("Find = %+v, want a match on %s", f, want.ID)
			}
			m := *f.Match
			if m.ID != want.ID || m.Stamp != stamp || m.AmountMinor != want.AmountMinor || m.Currency != cur || !m.Created.Equal(want.Created) {
				t.Fatalf("Match = %+v, want %s stamped %s, %d %s, created %v", m, want.ID, stamp, want.AmountMinor, cur, want.Created)
			}
			// Raw is the listed entity itself (a duplicate is answered with it).
			var raw map[string]any
			if err := json.Unmarshal(m.Raw, &raw); err != nil || raw["id"] != want.ID || !strings.Contains(string(m.Raw), stamp) {
				t.Fatalf("Match.Raw = %s (%v), want the listed entity %s carrying %s", m.Raw, err, want.ID, stamp)
			}
		}
		wantAbsent := func(t *testing.T, f rail.Finding, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("Find: %v", err)
			}
			if f.Match != nil || !f.Exhausted {
				t.Fatalf("Find = %+v (match %+v), want no match, exhausted", f, f.Match)
			}
		}
		name := string(a.Kind) + "/" + a.Subject
		total := 2*p + 20

		t.Run(name+"/match_only_on_page_3", func(t *testing.T) {
			items, target := withTarget(entities("e", total), 2*p+5)
			f, err := find(t, NewFakeRail(t, fx.List, a, since, items))
			wantMatch(t, f, err, target)
			if f.Pages != 3 || !f.Exhausted {
				t.Fatalf("Pages = %d, Exhausted = %v; want the match on page 3, the last", f.Pages, f.Exhausted)
			}
		})
		t.Run(name+"/absent_after_exhaustion", func(t *testing.T) {
			f, err := find(t, NewFakeRail(t, fx.List, a, since, entities("e", total)))
			wantAbsent(t, f, err)
			if f.Pages < 3 {
				t.Fatalf("Pages = %d: absence was concluded before the last page", f.Pages)
			}
		})
		t.Run(name+"/empty", func(t *testing.T) {
			f, err := find(t, NewFakeRail(t, fx.List, a, since, nil))
			wantAbsent(t, f, err)
			want := 1
			if fx.Listings != nil {
				want = fx.Listings(a)
			}
			if f.Pages != want {
				t.Fatalf("Pages = %d, want %d (one per listing)", f.Pages, want)
			}
		})
		t.Run(name+"/same_amount_without_stamp_is_not_a_match", func(t *testing.T) {
			items := []Listed{{ID: "same_amount", AmountMinor: amount, Currency: cur, Status: "succeeded", Created: now}}
			f, err := find(t, NewFakeRail(t, fx.List, a, since, items))
			wantAbsent(t, f, err)
		})
		t.Run(name+"/other_generation_and_other_sik_are_not_a_match", func(t *testing.T) {
			items := entities("e", 12) // decoys at 3, 7, 9
			f, err := find(t, NewFakeRail(t, fx.List, a, since, items))
			wantAbsent(t, f, err)
		})
		for _, fail := range []struct {
			name   string
			status int
			body   []byte
		}{
			{"page_2_fails_500", http.StatusInternalServerError, []byte(`{"error":{"message":"boom"}}`)},
			{"page_2_fails_429", http.StatusTooManyRequests, []byte(`{"error":{"message":"slow down"}}`)},
			{"page_2_is_garbage", http.StatusOK, []byte(`<html>`)},
			{"page_2_is_an_object_without_items", http.StatusOK, []byte(`{"object":"list"}`)},
		} {
			t.Run(name+"/"+fail.name, func(t *testing.T) {
				items, _ := withTarget(entities("e", total), 2*p+5)
				fake := NewFakeRail(t, fx.List, a, since, items)
				fake.Fail(2, fail.status, fail.body)
				f, err := find(t, fake)
				if err == nil || f.Exhausted || f.Match != nil {
					t.Fatalf("Find = %+v, %v; want an error, not exhausted, no match", f, err)
				}
			})
		}
		t.Run(name+"/insert_after_page_1", func(t *testing.T) {
			items, target := withTarget(entities("e", total), p+5)
			fake := NewFakeRail(t, fx.List, a, since, items)
			fake.After(func(n int, f *FakeRail) {
				if n == 1 {
					f.Insert(entities("new", 5)[:5]...)
				}
			})
			f, err := find(t, fake)
			wantMatch(t, f, err, target)
		})
		t.Run(name+"/inserts_after_every_page_target_last", func(t *testing.T) {
			items, target := withTarget(entities("e", total), total-1)
			fake := NewFakeRail(t, fx.List, a, since, items)
			fake.After(func(n int, f *FakeRail) {
				f.Insert(entities(fmt.Sprintf("new%d_", n), 7)...)
			})
			f, err := find(t, fake)
			wantMatch(t, f, err, target)
		})
		t.Run(name+"/transport_error", func(t *testing.T) {
			f, err := newAdapter().Find(context.Background(), errClient{}, a, stamp, since)
			if err == nil || f.Exhausted || f.Match != nil {
				t.Fatalf("Find = %+v, %v; want an error, not exhausted", f, err)
			}
		})
		t.Run(name+"/cancelled_context", func(t *testing.T) {
			fake := NewFakeRail(t, fx.List, a, since, entities("e", total))
			srv := httptest.NewServer(fake)
			defer srv.Close()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			f, err := newAdapter().Find(ctx, NewClient(srv.URL, "", srv.Client()), a, stamp, since)
			if err == nil || f.Exhausted {
				t.Fatalf("Find = %+v, %v; want an error, not exhausted", f, err)
			}
		})
	}
}

func runRefusal(t *testing.T, newAdapter func() rail.Adapter) {
	for _, status := range []int{http.StatusPaymentRequired, http.StatusForbidden, http.StatusConflict, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			msg := `250000 exceeds the 189900 still refundable on pay_1002 ("quoted" <tag> & más)`
			body := newAdapter().Refusal(status, "amount_over_refundable", msg)
			var top struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(body, &top); err != nil || top.Error == nil {
				t.Fatalf("refusal %s is not {\"error\":{…}}: %v", body, err)
			}
			var hasMsg, hasCode bool
			for _, v := range top.Error {
				hasMsg = hasMsg || v == msg
				hasCode = hasCode || v == "amount_over_refundable"
			}
			if !hasMsg || !hasCode {
				t.Fatalf("refusal %s lacks the message or the code", body)
			}
		})
	}
}

func runResolve(t *testing.T, newAdapter func() rail.Adapter, a rail.Action) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"not_found", http.StatusNotFound, `{"error":{"message":"No such payment"}}`},
		{"bad_request", http.StatusBadRequest, `{"error":{"code":"BAD_REQUEST_ERROR","description":"The id provided does not exist"}}`},
		{"server_error", http.StatusInternalServerError, `{"error":{"message":"boom"}}`},
		{"garbage", http.StatusOK, `<html>`},
		{"empty_object", http.StatusOK, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet {
					t.Errorf("Resolve sent %s %s: it must only read", r.Method, r.URL)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			_, err := newAdapter().Resolve(context.Background(), NewClient(srv.URL, "", srv.Client()), a)
			if !errors.Is(err, rail.ErrReferent) {
				t.Fatalf("Resolve error = %v, want ErrReferent", err)
			}
		})
	}
	t.Run("transport_error", func(t *testing.T) {
		if _, err := newAdapter().Resolve(context.Background(), errClient{}, a); !errors.Is(err, rail.ErrReferent) {
			t.Fatalf("Resolve error = %v, want ErrReferent", err)
		}
	})
}

// isStampLabel says whether a label's name is where a rail carries the
// stamp: metadata[countersign_sik] (Stripe's form), or an object argument's
// countersign_sik member (Razorpay's notes, an MCP tool's metadata
// argument). Another key that merely contains the stamp's name, such as
// metadata[0countersign_sik] or notes.a.countersign_sik, is the agent's own
// key and a label like any other.
func isStampLabel(name string) bool {
	if name == sik.StripeBodyField {
		return true
	}
	parent, key, ok := strings.Cut(name, ".")
	return ok && key == sik.StampKey && parent != "" && !strings.ContainsAny(parent, "[]")
}
