package razorpay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// maxBody bounds a rail answer the adapter reads.
const maxBody = 8 << 20

// get sends a read to the rail and returns its status and body.
func get(ctx context.Context, c rail.Client, path string) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read answer to GET %s: %w", path, err)
	}
	if len(body) > maxBody {
		return resp.StatusCode, nil, fmt.Errorf("answer to GET %s exceeds %d bytes", path, maxBody)
	}
	return resp.StatusCode, body, nil
}

type payment struct {
	ID             string  `json:"id"`
	Entity         string  `json:"entity"`
	Amount         *int64  `json:"amount"`
	AmountRefunded *int64  `json:"amount_refunded"`
	Currency       string  `json:"currency"`
	Status         string  `json:"status"`
	CustomerID     *string `json:"customer_id"`
}

// Resolve implements rail.Adapter. A refund reads GET /v1/payments/{id};
// a payout's referent is the fund account it names, with no read.
func (adapter) Resolve(ctx context.Context, c rail.Client, a rail.Action) (rail.Referent, error) {
	switch a.Kind {
	case sik.KindRefund:
	case sik.KindPayout:
		if a.Subject == "" {
			return rail.Referent{}, fmt.Errorf("%w: razorpay payout without a fund account", rail.ErrReferent)
		}
		return rail.Referent{Subject: a.Subject, Currency: a.Currency, Payee: a.Subject}, nil
	default:
		return rail.Referent{}, fmt.Errorf("%w: razorpay has no %q action", rail.ErrReferent, a.Kind)
	}
	ref, err := resolvePayment(ctx, c, a.Subject)
	if err != nil {
		return rail.Referent{}, fmt.Errorf("%w: razorpay payment %s: %w", rail.ErrReferent, a.Subject, err)
	}
	// A request in another currency than the payment's is the value
	// gate's to refuse (G2 currency_mismatch), with its reason.
	return ref, nil
}

func resolvePayment(ctx context.Context, c rail.Client, id string) (rail.Referent, error) {
	if !rail.IsID(id) {
		return rail.Referent{}, fmt.Errorf("%q is not a Razorpay id", id)
	}
	status, body, err := get(ctx, c, "/v1/payments/"+id)
	if err != nil {
		return rail.Referent{}, err
	}
	if status < 200 || status > 299 {
		return rail.Referent{}, fmt.Errorf("GET /v1/payments/%s: status %d: %s", id, status, errorMessage(body))
	}
	var p payment
	if err := json.Unmarshal(body, &p); err != nil {
		return rail.Referent{}, fmt.Errorf("undecodable payment: %w", err)
	}
	switch {
	case p.Entity != "payment" || p.ID != id:
		return rail.Referent{}, fmt.Errorf("answer is %s %q, want payment %q", p.Entity, p.ID, id)
	case p.Amount == nil || p.AmountRefunded == nil || *p.Amount < 0 || *p.AmountRefunded < 0:
		return rail.Referent{}, fmt.Errorf("payment lacks amount or amount_refunded")
	case len(p.Currency) != 3:
		return rail.Referent{}, fmt.Errorf("payment has currency %q", p.Currency)
	}
	ref := rail.Referent{Subject: p.ID, Currency: strings.ToUpper(p.Currency), AmountMinor: *p.Amount}
	if p.CustomerID != nil {
		ref.Payee = *p.CustomerID
	}
	if p.Status == "captured" {
		ref.RefundableMinor = max(0, *p.Amount-*p.AmountRefunded)
	}
	return ref, nil
}

// rzpError is Razorpay's error body.
type rzpError struct {
	Error *struct {
		Code        string `json:"code"`
		Description string `json:"description"`
		Reason      string `json:"reason"`
	} `json:"error"`
}

func errorMessage(body []byte) string {
	var e rzpError
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		return strings.TrimSpace(e.Error.Code + ": " + e.Error.Description)
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return fmt.Sprintf("%q", body)
}
