package mockrail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// Seed is the initial state of a Server, as read from a seed file.
type Seed struct {
	Accounts []Account `json:"accounts,omitempty"`
	Payments []Payment `json:"payments,omitempty"`
	Faults   []Fault   `json:"faults,omitempty"`
}

// LoadSeed reads a JSON seed file; unknown fields are errors.
func LoadSeed(path string) (Seed, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Seed{}, err
	}
	var s Seed
	if err := decodeStrict(b, &s); err != nil {
		return Seed{}, fmt.Errorf("seed %s: %w", path, err)
	}
	return s, nil
}

func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()

	m.HandleFunc("GET /_mock/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.HandleFunc("GET /_mock/accounts", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, map[string]any{"accounts": s.Accounts()})
	})
	m.HandleFunc("POST /_mock/accounts", func(w http.ResponseWriter, r *http.Request) {
		var a Account
		if !readControl(w, r, &a) {
			return
		}
		if err := s.AddAccount(a); err != nil {
			controlError(w, err)
			return
		}
		writeControl(w, http.StatusCreated, a)
	})
	m.HandleFunc("GET /_mock/payments", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, map[string]any{"payments": s.Payments()})
	})
	m.HandleFunc("POST /_mock/payments", func(w http.ResponseWriter, r *http.Request) {
		var p Payment
		if !readControl(w, r, &p) {
			return
		}
		out, err := s.AddPayment(p)
		if err != nil {
			controlError(w, err)
			return
		}
		writeControl(w, http.StatusCreated, out)
	})
	m.HandleFunc("GET /_mock/fault", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, faultSet{Rules: s.Faults()})
	})
	m.HandleFunc("POST /_mock/fault", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeControl(w, http.StatusBadRequest, controlErr{err.Error()})
			return
		}
		var rules []Fault
		var probe map[string]json.RawMessage
		if json.Unmarshal(b, &probe) == nil && probe["rules"] != nil {
			var fs faultSet
			err = decodeStrict(b, &fs)
			rules = fs.Rules
		} else {
			var f Fault
			err = decodeStrict(b, &f)
			rules = []Fault{f}
		}
		if err == nil {
			err = s.SetFaults(rules...)
		}
		if err != nil {
			writeControl(w, http.StatusBadRequest, controlErr{err.Error()})
			return
		}
		writeControl(w, http.StatusOK, faultSet{Rules: s.Faults()})
	})
	m.HandleFunc("GET /_mock/journal", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, s.Journal())
	})
	m.HandleFunc("POST /_mock/reset", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Reset(); err != nil {
			writeControl(w, http.StatusInternalServerError, controlErr{err.Error()})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	m.HandleFunc("/_mock/", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusNotFound, controlErr{fmt.Sprintf("no control endpoint %s %s", r.Method, r.URL.Path)})
	})

	// Stripe only.
	s.handle(m, "GET /v1/payment_intents/{id}", s.stripeGetPaymentIntent, nil)
	s.handle(m, "GET /v1/charges/{id}", s.stripeGetCharge, nil)
	s.handle(m, "POST /v1/payment_intents/{id}/capture", s.stripeCapture("amount_to_capture"), nil)
	s.handle(m, "POST /v1/charges/{id}/capture", s.stripeCapture("amount"), nil)
	s.handle(m, "POST /v1/payouts/{id}", s.stripeUpdatePayout, nil)
	s.handle(m, "POST /v1/payouts/{id}/cancel", s.stripeCancelPayout, nil)
	s.handle(m, "POST /v1/refunds", s.stripeCreateRefund, nil)
	s.handle(m, "POST /v1/transfers", s.stripeCreateTransfer, nil)
	s.handle(m, "GET /v1/transfers", s.stripeListTransfers, nil)
	s.handle(m, "GET /v1/transfers/{id}", s.stripeGetEntity(KindTransfer, "transfer"), nil)
	// Razorpay only.
	s.handle(m, "GET /v1/payments/{id}", nil, s.rzpGetPayment)
	s.handle(m, "POST /v1/payments/{id}/refund", nil, s.rzpCreateRefund)
	s.handle(m, "GET /v1/payments/{id}/refunds", nil, s.rzpListRefunds)
	s.handle(m, "GET /v1/payments/{id}/refunds/{rid}", nil, s.rzpGetEntity(KindRefund))
	// Both, told apart by the credential.
	s.handle(m, "GET /v1/refunds", s.stripeListRefunds, s.rzpListAllRefunds)
	s.handle(m, "GET /v1/refunds/{id}", s.stripeGetEntity(KindRefund, "refund"), s.rzpGetEntity(KindRefund))
	s.handle(m, "POST /v1/payouts", s.stripeCreatePayout, s.rzpCreatePayout)
	s.handle(m, "GET /v1/payouts", s.stripeListPayouts, s.rzpListPayouts)
	s.handle(m, "GET /v1/payouts/{id}", s.stripeGetEntity(KindPayout, "payout"), s.rzpGetEntity(KindPayout))

	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c := s.newCall(w, r)
		msg := fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, r.URL.Path)
		if c.rail == Razorpay {
			c.fail(rzpErr(http.StatusNotFound, "BAD_REQUEST_ERROR", "", "The requested URL was not found on the server."), OutcomeNotFound)
			return
		}
		c.fail(stripeRequestErr(http.StatusNotFound, "", "", msg), OutcomeNotFound)
	})
	return m
}

type faultSet struct {
	Rules []Fault `json:"rules"`
}

type controlErr struct {
	Error string `json:"error"`
}

func readControl(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		err = decodeStrict(b, v)
	}
	if err != nil {
		writeControl(w, http.StatusBadRequest, controlErr{"bad request body: " + err.Error()})
		return false
	}
	return true
}

func controlError(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	if errors.Is(err, errExists) {
		status = http.StatusConflict
	}
	writeControl(w, status, controlErr{err.Error()})
}

func writeControl(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
