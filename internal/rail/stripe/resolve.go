package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// maxBody bounds a rail answer the adapter reads. A page of 100 refunds is
// usually well under 1 MiB, but the agent chooses descriptions and metadata
// (an entity reaches ~110 KB): Find asks for a smaller page when one
// exceeds it (errTooLarge).
const maxBody = 8 << 20

// errTooLarge: an answer exceeds maxBody.
var errTooLarge = fmt.Errorf("answer exceeds %d bytes", maxBody)

// get sends a read to the rail and returns its status and body.
func get(ctx context.Context, c rail.Client, path string) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(ctx, http.MethodGet, path, map[string]string{"Stripe-Version": APIVersion}, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read answer to GET %s: %w", path, err)
	}
	if len(body) > maxBody {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: %w", path, errTooLarge)
	}
	return resp.StatusCode, body, nil
}

// getObject GETs path and decodes a 2xx answer into v.
func getObject(ctx context.Context, c rail.Client, path string, v any) error {
	status, body, err := get(ctx, c, path)
	if err != nil {
		return err
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("GET %s: status %d: %s", path, status, errorMessage(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: undecodable answer: %w", path, err)
	}
	return nil
}

// expandable is a Stripe field that is an id or, when expanded, an object
// with an id (latest_charge, customer, destination, payment_intent).
type expandable struct {
	ID     string
	Object json.RawMessage // the expanded object, nil when only an id
}

// UnmarshalJSON accepts null, "id" or {"id": …}.
func (e *expandable) UnmarshalJSON(b []byte) error {
	*e = expandable{}
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &e.ID)
	case len(b) > 0 && b[0] == '{':
		var o struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		e.ID, e.Object = o.ID, append(json.RawMessage(nil), b...)
		return nil
	}
	return fmt.Errorf("stripe: expandable field is %.20s, want null, an id or an object", b)
}

// present is an expandable field that records whether it was sent at all
// (null included), unlike a pointer, which null leaves nil.
type present struct {
	expandable
	Sent bool
}

// UnmarshalJSON implements json.Unmarshaler; it is called for null too.
func (p *present) UnmarshalJSON(b []byte) error {
	p.Sent = true
	return p.expandable.UnmarshalJSON(b)
}

type paymentIntent struct {
	ID             string     `json:"id"`
	Object         string     `json:"object"`
	AmountReceived *int64     `json:"amount_received"`
	Currency       string     `json:"currency"`
	Customer       expandable `json:"customer"`
	LatestCharge   present    `json:"latest_charge"` // absent before API version 2022-11-15
}

type charge struct {
	ID             string     `json:"id"`
	Object         string     `json:"object"`
	AmountCaptured *int64     `json:"amount_captured"`
	AmountRefunded *int64     `json:"amount_refunded"`
	Currency       string     `json:"currency"`
	Customer       expandable `json:"customer"`
	PaymentIntent  expandable `json:"payment_intent"`
}

func (ch charge) check(id string) error {
	switch {
	case ch.Object != "charge" || ch.ID != id:
		return fmt.Errorf("answer is %s %q, want charge %q", ch.Object, ch.ID, id)
	case ch.AmountCaptured == nil || ch.AmountRefunded == nil || *ch.AmountCaptured < 0 || *ch.AmountRefunded < 0:
		return fmt.Errorf("charge %s lacks amount_captured or amount_refunded", id)
	case !isCurrency(ch.Currency):
		return fmt.Errorf("charge %s has currency %q", id, ch.Currency)
	}
	return nil
}

func (ch charge) refundable() int64 {
	return max(0, *ch.AmountCaptured-*ch.AmountRefunded)
}

// Resolve implements rail.Adapter. Refunds read the PaymentIntent (with its
// latest charge) or the Charge; payouts and transfers need no read: their
// referent is the destination the request names.
func (adapter) Resolve(ctx context.Context, c rail.Client, a rail.Action) (rail.Referent, error) {
	var ref rail.Referent
	var err error
	switch a.Kind {
	case sik.KindRefund:
		if strings.HasPrefix(a.Subject, "pi_") {
			ref, err = resolvePaymentIntent(ctx, c, a.Subject)
		} else {
			ref, err = resolveCharge(ctx, c, a.Subject)
		}
	case sik.KindPayout, sik.KindTransfer:
		if a.Subject == "" {
			return rail.Referent{}, fmt.Errorf("%w: stripe %s without a destination", rail.ErrReferent, a.Kind)
		}
		return rail.Referent{Subject: a.Subject, Currency: a.Currency, Payee: a.Subject}, nil
	default:
		return rail.Referent{}, fmt.Errorf("%w: stripe has no %q action", rail.ErrReferent, a.Kind)
	}
	if err != nil {
		return rail.Referent{}, fmt.Errorf("%w: stripe %s %s: %w", rail.ErrReferent, a.Kind, a.Subject, err)
	}
	// A request in another currency than the payment's is the value
	// gate's to refuse (G2 currency_mismatch), with its reason.
	return ref, nil
}

func resolvePaymentIntent(ctx context.Context, c rail.Client, id string) (rail.Referent, error) {
	if !rail.IsID(id) {
		return rail.Referent{}, fmt.Errorf("%q is not a Stripe id", id)
	}
	var pi paymentIntent
	if err := getObject(ctx, c, "/v1/payment_intents/"+id+"?"+url.Values{"expand[]": {"latest_charge"}}.Encode(), &pi); err != nil {
		return rail.Referent{}, err
	}
	switch {
	case pi.Object != "payment_intent" || pi.ID != id:
		return rail.Referent{}, fmt.Errorf("answer is %s %q, want payment_intent %q", pi.Object, pi.ID, id)
	case pi.AmountReceived == nil || *pi.AmountReceived < 0:
		return rail.Referent{}, errors.New("payment_intent lacks amount_received")
	case !isCurrency(pi.Currency):
		return rail.Referent{}, fmt.Errorf("payment_intent has currency %q", pi.Currency)
	case !pi.LatestCharge.Sent:
		return rail.Referent{}, errors.New("payment_intent lacks latest_charge (Stripe-Version not honoured?)")
	}
	ref := rail.Referent{
		Subject:     pi.ID,
		Currency:    strings.ToUpper(pi.Currency),
		AmountMinor: *pi.AmountReceived,
		Payee:       pi.Customer.ID,
	}
	if pi.LatestCharge.ID == "" {
		return ref, nil // never charged: nothing to refund
	}
	var ch charge
	if pi.LatestCharge.Object != nil {
		if err := json.Unmarshal(pi.LatestCharge.Object, &ch); err != nil {
			return rail.Referent{}, fmt.Errorf("latest_charge: %w", err)
		}
	} else if err := getCharge(ctx, c, pi.LatestCharge.ID, &ch); err != nil {
		return rail.Referent{}, err
	}
	if err := ch.check(pi.LatestCharge.ID); err != nil {
		return rail.Referent{}, err
	}
	// The charge came from the PaymentIntent's own expansion; it names
	// another PaymentIntent only if the answer is not what was asked for.
	if ch.PaymentIntent.ID != "" && ch.PaymentIntent.ID != pi.ID {
		return rail.Referent{}, fmt.Errorf("latest_charge %s belongs to payment_intent %q", ch.ID, ch.PaymentIntent.ID)
	}
	if !strings.EqualFold(ch.Currency, pi.Currency) {
		return rail.Referent{}, fmt.Errorf("latest_charge %s is in %s, the payment_intent in %s", ch.ID, ch.Currency, pi.Currency)
	}
	ref.RefundableMinor = ch.refundable()
	return ref, nil
}

func getCharge(ctx context.Context, c rail.Client, id string, ch *charge) error {
	if !rail.IsID(id) {
		return fmt.Errorf("%q is not a Stripe id", id)
	}
	return getObject(ctx, c, "/v1/charges/"+id, ch)
}

func resolveCharge(ctx context.Context, c rail.Client, id string) (rail.Referent, error) {
	var ch charge
	if err := getCharge(ctx, c, id, &ch); err != nil {
		return rail.Referent{}, err
	}
	if err := ch.check(id); err != nil {
		return rail.Referent{}, err
	}
	subject := ch.ID
	if ch.PaymentIntent.ID != "" {
		subject = ch.PaymentIntent.ID
	}
	return rail.Referent{
		Subject:         subject,
		Currency:        strings.ToUpper(ch.Currency),
		AmountMinor:     *ch.AmountCaptured,
		RefundableMinor: ch.refundable(),
		Payee:           ch.Customer.ID,
	}, nil
}

// stripeError is Stripe's error body.
type stripeError struct {
	Error *struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorMessage is a short description of an error body, for errors.
func errorMessage(body []byte) string {
	var e stripeError
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		return strings.TrimSpace(e.Error.Type + " " + e.Error.Code + ": " + e.Error.Message)
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return fmt.Sprintf("%q", body)
}
