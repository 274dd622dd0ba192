package stripe

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// role is where a body member stands; README.md has the same table with
// the Stripe documentation each row rests on.
type role int

const (
	// roleSubject names the action's subject (in the key).
	roleSubject role = iota + 1
	// roleAmount and roleCurrency are the key's amount and currency.
	roleAmount
	roleCurrency
	// roleKey changes what the rail does: it is in the key as Extra. An
	// explicit default is the same action as none (normalised away),
	// unless keyDefault keeps the effective value in the key.
	roleKey
	// roleLabel has no effect on what money moves where (a description, a
	// refund's reason — DESIGN §3): read, checked, left out of the key.
	roleLabel
)

type member struct {
	role  role
	valid func(string) error
	// dflt is the rail's documented default for a roleKey member.
	dflt string
	// keyDefault keys the effective value even when it is the default
	// (payout method: absent and "standard" are both keyed "standard").
	keyDefault bool
	// closed marks a roleLabel member whose value is one of a fixed set
	// (a refund's reason): a label, but not free text.
	closed bool
}

// spec is one action's members.
type spec struct {
	members map[string]member
	// refused are members Stripe documents for the endpoint that
	// Countersign cannot place as key or label, with the reason.
	refused map[string]string
	// expandable are the fields expand[] may name (the object's
	// x-expandableFields in Stripe's OpenAPI spec); expand changes only
	// the answer's shape, so it is a label.
	expandable []string
}

// Metadata limits (Stripe's metadata docs): 50 keys, key names up to 40
// characters without square brackets, values up to 500 characters. One key
// is kept for countersign_sik.
const (
	maxMetadataKeys   = 50
	maxMetadataKeyLen = 40
	maxMetadataValLen = 500
	maxExpand         = 20
)

var (
	subject  = member{role: roleSubject, valid: idValue}
	amountM  = member{role: roleAmount}
	currency = member{role: roleCurrency}
	text5000 = member{role: roleLabel, valid: rail.MaxLen(5000)}
)

// always refused, whatever the action.
var refusedEverywhere = map[string]string{
	"metadata": "send metadata as metadata[key]=value; a bare metadata unsets every key, and Countersign writes metadata[countersign_sik]",
	"_method":  "it can make the rail read the request as another method",
}

var specs = map[sik.Kind]spec{
	sik.KindRefund: {
		members: map[string]member{
			"payment_intent":         subject,
			"charge":                 subject,
			"amount":                 amountM,
			"currency":               currency,
			"reason":                 {role: roleLabel, closed: true, valid: rail.OneOf("duplicate", "fraudulent", "requested_by_customer")},
			"refund_application_fee": {role: roleKey, valid: noFeeRefund, dflt: "false"},
			"reverse_transfer":       {role: roleKey, valid: boolean, dflt: "false"},
		},
		refused: map[string]string{
			"customer":           "a refund to a customer balance is not an action Countersign keys",
			"origin":             "a refund from the customer balance is not an action Countersign keys",
			"instructions_email": "it sends refund instructions to an address the model chose",
		},
		// payment_intent is left out: an expanded PaymentIntent carries
		// its client_secret, which the agent may not see (query.go); so are
		// charge, customer and payment_method, which carry the card's and
		// its holder's details where no ext_proc removes them (found by a
		// review: expand[]=charge on a refund of 1 unit answered them).
		expandable: []string{"balance_transaction", "destination_details", "failure_balance_transaction",
			"next_action", "presentment_details", "source_transfer_reversal", "transfer_reversal"},
	},
	sik.KindPayout: {
		members: map[string]member{
			"amount":               amountM,
			"currency":             currency,
			"destination":          subject,
			"method":               {role: roleKey, valid: rail.OneOf("standard", "instant"), dflt: "standard", keyDefault: true},
			"description":          text5000,
			"statement_descriptor": {role: roleLabel, valid: rail.MaxLen(22)},
		},
		refused: map[string]string{
			"source_type":   "it chooses the balance that pays, and Stripe's default depends on the account, so an explicit and an absent one cannot be shown to be one payout; omit it",
			"payout_method": "a payout to a v2 financial account is not an action Countersign keys",
		},
		// destination is left out: the card or bank account it expands to
		// carries their details under names of their own (found by a
		// review).
		expandable: []string{"application_fee", "balance_transaction", "failure_balance_transaction", "original_payout", "reversed_by", "trace_id"},
	},
	sik.KindTransfer: {
		members: map[string]member{
			"amount":             amountM,
			"currency":           currency,
			"destination":        subject,
			"source_transaction": {role: roleKey, valid: idValue},
			"description":        text5000,
			"transfer_group":     text5000,
		},
		refused: map[string]string{
			"source_type": "it chooses the balance that pays, and Stripe's default (\"for most users\" card) depends on the account; omit it",
		},
		// destination (the connected account, its person's details),
		// destination_payment and source_transaction (charges) are left
		// out, as a payout's destination is.
		expandable: []string{"balance_transaction", "reversals"},
	},
}

func idValue(v string) error {
	if !rail.IsID(v) {
		return fmt.Errorf("%q is not a Stripe id", v)
	}
	return nil
}

// noFeeRefund accepts only refund_application_fee=false. true also
// returns the platform's application fee (a share of it, on a partial
// refund) to the connected account: the platform's money, leaving to a
// payee no allowlist names, in an amount no gate values and no budget or
// window counts (found by a review). Such a refund is refused until a
// mandate can grant it.
func noFeeRefund(v string) error {
	if err := boolean(v); err != nil {
		return err
	}
	if v == "true" {
		return errors.New("refunding the application fee moves the platform's money to the connected account, which no gate values or budget counts; send the refund without it")
	}
	return nil
}

func boolean(v string) error {
	if v != "true" && v != "false" {
		return fmt.Errorf("%q is not true or false", v)
	}
	return nil
}

// read places every pair of the body: a table member (sent once, plainly,
// non-empty, valid), metadata[key], expand[], or the stamp. Anything else
// is refused, naming the member. labels are the label members and
// metadata (the stamp excluded); expand[] shapes only the answer and is
// recorded nowhere, so it is not one.
func (s spec) read(kind sik.Kind, pairs []pair) (fields map[string]string, labels map[string]rail.Label, stamp string, err error) {
	fields = map[string]string{}
	seen := map[string]bool{}
	var keys rail.KeySet
	metadata, expand := 0, 0
	for _, p := range pairs {
		if p.name == "expand[]" {
			if expand++; expand > maxExpand {
				return nil, nil, "", malformed("expand", "more than %d fields", maxExpand)
			}
			if rail.OneOf(s.expandable...)(p.value) != nil {
				return nil, nil, "", malformed("expand", "%q is not a field a %s can expand", p.value, kind)
			}
			continue
		}
		if seen[p.name] {
			return nil, nil, "", malformed(baseName(p.name), "%q sent twice; it must be sent once", p.name)
		}
		seen[p.name] = true
		if key, ok := metadataKey(p.name); ok {
			if err := checkMetadata(key, p.value); err != nil {
				return nil, nil, "", err
			}
			if err := keys.Add(key); err != nil {
				return nil, nil, "", malformed("metadata", "%v", err)
			}
			if key == sik.StampKey {
				// The stamp is Countersign's: ext_proc overwrites it, and
				// the engine judges what was sent where none will.
				stamp = p.value
			} else {
				if metadata++; metadata > maxMetadataKeys-1 {
					return nil, nil, "", malformed("metadata", "more than %d keys; Countersign adds %s", maxMetadataKeys-1, sik.StampKey)
				}
				if err := rail.AddLabel(&labels, p.name, p.value, true); err != nil {
					return nil, nil, "", malformed(baseName(p.name), "%v", err)
				}
			}
			continue
		}
		m, ok := s.members[p.name]
		if !ok {
			return nil, nil, "", s.unknown(kind, p.name)
		}
		if p.value == "" {
			return nil, nil, "", malformed(p.name, "is empty; omit it or give a value")
		}
		if m.valid != nil {
			if err := m.valid(p.value); err != nil {
				return nil, nil, "", malformed(p.name, "%v", err)
			}
		}
		fields[p.name] = p.value
		if m.role == roleLabel {
			if err := rail.AddLabel(&labels, p.name, p.value, !m.closed); err != nil {
				return nil, nil, "", malformed(p.name, "%v", err)
			}
		}
	}
	return fields, labels, stamp, nil
}

// unknown names why a member is refused.
func (s spec) unknown(kind sik.Kind, name string) error {
	if why, ok := s.refused[name]; ok {
		return malformed(name, "refused: %s", why)
	}
	if why, ok := refusedEverywhere[name]; ok {
		return malformed(name, "refused: %s", why)
	}
	base := baseName(name)
	if _, ok := s.members[base]; ok || base == "expand" || base == "metadata" {
		return malformed(base, "sent as %q; it must be a plain value (or metadata[key], expand[])", name)
	}
	return malformed(name, "is not a member of a Stripe %s that Countersign knows, so it is refused", kind)
}

func baseName(name string) string {
	base, _, _ := strings.Cut(name, "[")
	return base
}

// metadataKey returns k for "metadata[k]" where k holds no bracket.
func metadataKey(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "metadata[")
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, "]")
	if !ok || key == "" || strings.ContainsAny(key, "[]") {
		return "", false
	}
	return key, true
}

func checkMetadata(key, value string) error {
	switch {
	case utf8.RuneCountInString(key) > maxMetadataKeyLen:
		return malformed("metadata", "key %.50q is longer than %d characters", key, maxMetadataKeyLen)
	case utf8.RuneCountInString(value) > maxMetadataValLen:
		return malformed("metadata", "value of %q is longer than %d characters", key, maxMetadataValLen)
	}
	return nil
}

// extra is the key's Extra: every roleKey member's effective value, an
// explicit default dropped unless the member keys its default.
func (s spec) extra(fields map[string]string) map[string]string {
	extra := map[string]string{}
	for name, m := range s.members {
		if m.role != roleKey {
			continue
		}
		sent, present := fields[name]
		if v, keyed := (rail.KeyMember{Default: m.dflt, KeyDefault: m.keyDefault}).Keyed(sent, present); keyed {
			extra[name] = v
		}
	}
	if len(extra) == 0 {
		return nil
	}
	return extra
}
