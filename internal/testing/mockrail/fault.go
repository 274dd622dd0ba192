package mockrail

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// Profile names a fault.
type Profile string

// Fault profiles.
const (
	// FaultNone turns faults off.
	FaultNone Profile = "none"
	// FaultTimeoutAfterApply applies the request (and saves its idempotent
	// response), then never answers: the connection is closed without a
	// response when the client gives up, when Delay passes (if set), or when
	// the Server is closed.
	FaultTimeoutAfterApply Profile = "timeout_after_apply"
	// FaultResetBeforeApply closes the connection (TCP RST) without applying
	// anything; an idempotency key it reserved is released.
	FaultResetBeforeApply Profile = "reset_before_apply"
	// Fault5xxAfterApply applies the request, then answers 500 and saves that
	// 500 under the idempotency key, so a replay returns it again.
	Fault5xxAfterApply Profile = "5xx_after_apply"
	// FaultReplayOther applies the request but answers 200 with the body of a
	// different, earlier entity (same kind first, then any kind, then a
	// payment of the account; if there is none, the true body). The
	// idempotency key saves the true response.
	FaultReplayOther Profile = "replay_other"
	// FaultReplicaLag hides from list endpoints every entity created less than
	// Delay (default 2 s) ago.
	FaultReplicaLag Profile = "replica_lag"
	// FaultSlow waits Delay (default 1 s) before applying and answering; the
	// idempotency key stays in use meanwhile.
	FaultSlow Profile = "slow"
	// FaultDeclineBeforeApply refuses the request as a business rejection
	// (Stripe 402 card_declined, Razorpay 400 BAD_REQUEST_ERROR) without
	// applying it, and saves that answer under the idempotency key, as the
	// rails do with a definite refusal.
	FaultDeclineBeforeApply Profile = "decline_before_apply"
)

// Default delays.
const (
	DefaultReplicaLag = 2 * time.Second
	DefaultSlowDelay  = time.Second
)

var profiles = map[Profile]bool{
	FaultNone: true, FaultTimeoutAfterApply: true, FaultResetBeforeApply: true,
	Fault5xxAfterApply: true, FaultReplayOther: true, FaultReplicaLag: true, FaultSlow: true, FaultDeclineBeforeApply: true,
}

// Fault is one fault rule. A request is matched against the rules in order
// and the first match applies; a rule with Count > 0 is removed once it has
// applied Count times. Rules see only rail requests, never /_mock/.
//
// Which requests a rule matches: Rail, Method and Path (a path.Match pattern
// such as "/v1/payments/*/refund") narrow it when set. Without Method,
// timeout_after_apply, reset_before_apply, 5xx_after_apply, replay_other and
// decline_before_apply match POSTs only (the money-moving calls); slow matches every rail request;
// replica_lag matches list requests only; replay_other never matches a list.
// Idempotent replays, 409s, key mismatches, authentication failures and
// parameter-validation errors are answered before a rule is consulted and do
// not consume it.
type Fault struct {
	Profile Profile  `json:"profile"`
	Count   int      `json:"count,omitempty"`
	Delay   Duration `json:"delay,omitempty"`
	Rail    Rail     `json:"rail,omitempty"`
	Method  string   `json:"method,omitempty"`
	Path    string   `json:"path,omitempty"`
}

func (f Fault) validate() error {
	if !profiles[f.Profile] {
		return fmt.Errorf("fault: unknown profile %q", f.Profile)
	}
	if f.Count < 0 {
		return fmt.Errorf("fault %s: count must be >= 0", f.Profile)
	}
	if f.Delay < 0 {
		return fmt.Errorf("fault %s: delay must be >= 0", f.Profile)
	}
	if f.Rail != "" && !f.Rail.valid() {
		return fmt.Errorf("fault %s: unknown rail %q", f.Profile, f.Rail)
	}
	if f.Path != "" {
		if _, err := path.Match(f.Path, "/"); err != nil {
			return fmt.Errorf("fault %s: bad path pattern %q: %w", f.Profile, f.Path, err)
		}
	}
	return nil
}

// delay is the effective delay of the rule.
func (f Fault) delay() time.Duration {
	if f.Delay > 0 {
		return time.Duration(f.Delay)
	}
	switch f.Profile {
	case FaultReplicaLag:
		return DefaultReplicaLag
	case FaultSlow:
		return DefaultSlowDelay
	}
	return 0
}

func validateFaults(fs []Fault) ([]Fault, error) {
	out := make([]Fault, 0, len(fs))
	for _, f := range fs {
		if err := f.validate(); err != nil {
			return nil, err
		}
		if f.Profile == FaultNone {
			continue
		}
		f.Method = strings.ToUpper(f.Method)
		out = append(out, f)
	}
	return out, nil
}

// reqClass is what a rail request does, for fault matching.
type reqClass int

const (
	classCreate reqClass = iota
	classRead
	classList
)

func (f Fault) matches(rail Rail, method, p string, class reqClass) bool {
	switch f.Profile {
	case FaultReplicaLag:
		if class != classList {
			return false
		}
	case FaultReplayOther:
		if class == classList {
			return false
		}
	}
	if f.Rail != "" && f.Rail != rail {
		return false
	}
	switch {
	case f.Method != "":
		if f.Method != method {
			return false
		}
	case f.Profile != FaultSlow && f.Profile != FaultReplicaLag:
		if method != http.MethodPost {
			return false
		}
	}
	if f.Path != "" && f.Path != p {
		if ok, _ := path.Match(f.Path, p); !ok {
			return false
		}
	}
	return true
}

// takeFaultLocked returns the first rule that matches and consumes one use of
// it. The zero Fault means none.
func (s *Server) takeFaultLocked(rail Rail, method, p string, class reqClass) Fault {
	for i, f := range s.faults {
		if !f.matches(rail, method, p, class) {
			continue
		}
		if f.Count > 0 {
			s.faults[i].Count--
			if s.faults[i].Count == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return f
	}
	return Fault{}
}

// ParseFault parses the command-line form of a rule:
//
//	PROFILE[:key=value,...]   keys: count, delay, rail, method, path
//
// for example "5xx_after_apply:count=1,path=/v1/refunds" or
// "replica_lag:delay=3s".
func ParseFault(s string) (Fault, error) {
	s = strings.TrimSpace(s)
	name, rest, _ := strings.Cut(s, ":")
	f := Fault{Profile: Profile(strings.TrimSpace(name))}
	if rest != "" {
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return Fault{}, fmt.Errorf("fault %q: %q is not key=value", s, kv)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch k {
			case "count":
				n, err := strconv.Atoi(v)
				if err != nil {
					return Fault{}, fmt.Errorf("fault %q: count: %w", s, err)
				}
				f.Count = n
			case "delay":
				d, err := time.ParseDuration(v)
				if err != nil {
					return Fault{}, fmt.Errorf("fault %q: delay: %w", s, err)
				}
				f.Delay = Duration(d)
			case "rail":
				f.Rail = Rail(v)
			case "method":
				f.Method = strings.ToUpper(v)
			case "path":
				f.Path = v
			default:
				return Fault{}, fmt.Errorf("fault %q: unknown key %q (want count, delay, rail, method, path)", s, k)
			}
		}
	}
	if err := f.validate(); err != nil {
		return Fault{}, err
	}
	return f, nil
}

// ParseFaults parses rules separated by ";" (the MOCKRAIL_FAULT form).
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		f, err := ParseFault(part)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Duration is a time.Duration written in JSON as a Go duration string ("2s").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`duration must be a string such as "2s" or "250ms"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
