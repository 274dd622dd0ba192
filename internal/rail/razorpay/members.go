package razorpay

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// role is where a body member stands; README.md has the same table with
// the Razorpay documentation each row rests on.
type role int

const (
	roleAmount   role = iota + 1 // in the key
	roleCurrency                 // in the key
	roleSubject                  // the payout's fund account (in the key)
	// roleKey changes what the rail does: in the key as Extra. An explicit
	// default is the same action as none; keyDefault keys the effective
	// value either way (refund speed: absent and "normal" are "normal").
	roleKey
	// roleLabel moves no money anywhere (receipt, reference_id, narration,
	// notes): read, checked, left out of the key.
	roleLabel
)

// kind of JSON value a member takes.
type jsonKind int

const (
	jsonString jsonKind = iota + 1
	jsonBool
	jsonInteger
	jsonNotes
)

type member struct {
	role     role
	json     jsonKind
	required bool
	valid    func(string) error
	dflt     string
	// keyDefault keys the effective value even when it is the default.
	keyDefault bool
	// documented lists the values the rail documents for a roleKey string
	// member that also takes others (a payout's default purposes; the
	// account's own are made in the Dashboard). Any other value may be text
	// the model composed: it is keyed, and also reported as a free-text
	// label, so the mandate's free_text sees it.
	documented []string
}

type spec struct {
	members map[string]member
	refused map[string]string
}

// Payout modes, case-sensitive (Razorpay's create-payout docs).
var payoutModes = []string{"NEFT", "RTGS", "IMPS", "UPI", "card", "amazonpay"}

// defaultPurposes are the payout purposes every RazorpayX account has
// (create payout); others are created in the Dashboard, never through the
// API.
var defaultPurposes = []string{"refund", "cashback", "payout", "salary", "utility bill", "vendor bill"}

// maxPurposeLen bounds a payout purpose: the longest default is 12
// characters, and 30 (narration's limit) leaves room for a Dashboard
// purpose of a few words while keeping the member a name, not a message.
const maxPurposeLen = 30

var specs = map[sik.Kind]spec{
	sik.KindRefund: {members: map[string]member{
		"amount":   {role: roleAmount, json: jsonInteger},
		"currency": {role: roleCurrency, json: jsonString, valid: isCurrency},
		"speed":    {role: roleKey, json: jsonString, valid: rail.OneOf("normal", "optimum"), dflt: "normal", keyDefault: true},
		"receipt":  {role: roleLabel, json: jsonString, valid: rail.MaxLen(40)},
		"notes":    {role: roleLabel, json: jsonNotes},
	}},
	sik.KindPayout: {
		members: map[string]member{
			"account_number":       {role: roleKey, json: jsonString, required: true, valid: idValue},
			"fund_account_id":      {role: roleSubject, json: jsonString, required: true, valid: idValue},
			"amount":               {role: roleAmount, json: jsonInteger, required: true},
			"currency":             {role: roleCurrency, json: jsonString, required: true, valid: rail.OneOf("INR")},
			"mode":                 {role: roleKey, json: jsonString, required: true, valid: rail.OneOf(payoutModes...)},
			"purpose":              {role: roleKey, json: jsonString, required: true, valid: purpose, documented: defaultPurposes},
			"queue_if_low_balance": {role: roleKey, json: jsonBool, dflt: "false"},
			"reference_id":         {role: roleLabel, json: jsonString, valid: rail.MaxLen(40)},
			"narration":            {role: roleLabel, json: jsonString, valid: narration},
			"notes":                {role: roleLabel, json: jsonNotes},
		},
		refused: map[string]string{
			"fund_account": "a composite payout creates a contact and fund account from details the model chose; create the fund account first and send fund_account_id",
		},
	},
}

// Notes limits (Razorpay's notes docs): 15 key-value pairs, values of up
// to 256 characters. One pair is kept for countersign_sik.
const (
	maxNotes      = 15
	maxNoteValLen = 256
)

func idValue(v string) error {
	if !rail.IsID(v) {
		return fmt.Errorf("%q is not a Razorpay id", v)
	}
	return nil
}

func isCurrency(v string) error {
	if len(v) != 3 {
		return fmt.Errorf("%q is not a three-letter ISO 4217 code", v)
	}
	for i := 0; i < 3; i++ {
		if c := v[i] | 0x20; c < 'a' || c > 'z' {
			return fmt.Errorf("%q is not a three-letter ISO 4217 code", v)
		}
	}
	return nil
}

// narration: at most 30 characters of a-z, A-Z, 0-9 and space.
func narration(v string) error {
	if len(v) > 30 {
		return fmt.Errorf("longer than 30 characters")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != ' ' && (c == '_' || !rail.IDByte(c)) {
			return fmt.Errorf("%q: only letters, digits and spaces", v)
		}
	}
	return nil
}

// purpose accepts the name of a payout purpose: at most maxPurposeLen
// characters, words of lower-case letters, digits and underscores, the
// first starting with a letter, separated by single spaces (one spelling
// per purpose). It was any string of up to 100 characters, where text the
// model composed (a card number) left past free_text: refuse (found by a
// review).
func purpose(v string) error {
	if len(v) > maxPurposeLen {
		return fmt.Errorf("%d characters; a payout purpose is at most %d (the defaults are %s; others are made in the Dashboard)",
			len(v), maxPurposeLen, strings.Join(defaultPurposes, ", "))
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		word := c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '_')
		space := c == ' ' && i > 0 && i < len(v)-1 && v[i-1] != ' '
		if !word && !space {
			return fmt.Errorf("%.40q is not the name of a payout purpose: lower-case words of letters, digits and underscores, starting with a letter, one space between (the defaults are %s)",
				v, strings.Join(defaultPurposes, ", "))
		}
	}
	return nil
}

// read places every member of the body (in name order, so the error is
// deterministic) and returns the scalar ones as strings, and the label
// members (notes as notes.<key>, the stamp excluded) with any key member
// outside its documented values: all free text.
func (s spec) read(kind sik.Kind, f fields) (map[string]string, map[string]rail.Label, error) {
	names := make([]string, 0, len(f))
	for k := range f {
		names = append(names, k)
	}
	sort.Strings(names)
	out := map[string]string{}
	var labels map[string]rail.Label
	for _, name := range names {
		raw := f[name]
		m, ok := s.members[name]
		if !ok {
			if why, refused := s.refused[name]; refused {
				return nil, nil, malformed(name, "refused: %s", why)
			}
			return nil, nil, malformed(name, "is not a member of a Razorpay %s that Countersign knows, so it is refused", kind)
		}
		v, err := m.value(name, raw)
		if err != nil {
			return nil, nil, err
		}
		if m.valid != nil {
			if err := m.valid(v); err != nil {
				return nil, nil, malformed(name, "%v", err)
			}
		}
		out[name] = v
		if m.documented != nil && !slices.Contains(m.documented, v) {
			if err := rail.AddLabel(&labels, name, v, true); err != nil {
				return nil, nil, malformed(name, "%v", err)
			}
		}
		if m.role != roleLabel {
			continue
		}
		if m.json != jsonNotes {
			if err := rail.AddLabel(&labels, name, v, true); err != nil {
				return nil, nil, malformed(name, "%v", err)
			}
			continue
		}
		notes, _ := readNotes(raw) // checked by value
		if stamp := sentStamp(raw); stamp != "" {
			// Under a name no member has (a dotted one is refused above).
			out[sik.RazorpayBodyField] = stamp
		}
		for k, nv := range notes {
			if err := rail.AddLabel(&labels, "notes."+k, nv, true); err != nil {
				return nil, nil, malformed(name, "%v", err)
			}
		}
	}
	return out, labels, nil
}

// value reads raw as the member's JSON kind. null is refused (omit the
// member instead), except for notes, where it means none.
func (m member) value(name string, raw json.RawMessage) (string, error) {
	s := string(raw)
	if s == "null" && m.json != jsonNotes {
		return "", malformed(name, "null; omit it instead")
	}
	switch m.json {
	case jsonInteger:
		return s, nil // amount() reads it
	case jsonBool:
		if s != "true" && s != "false" {
			return "", malformed(name, "%.40s is not true or false", s)
		}
		return s, nil
	case jsonNotes:
		return "", checkNotes(raw)
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", malformed(name, "%.40s is not a string", raw)
	}
	if v == "" {
		return "", malformed(name, "is empty; omit it or give a value")
	}
	return v, nil
}

// checkNotes accepts null or an object of string values with room for the
// stamp: ext_proc writes notes.countersign_sik into it. An empty array
// (how Razorpay writes empty notes back) cannot take the stamp.
func checkNotes(raw json.RawMessage) error {
	if string(raw) == "null" {
		return nil
	}
	var notes map[string]json.RawMessage
	if err := json.Unmarshal(raw, &notes); err != nil || notes == nil {
		return malformed("notes", "must be an object of key-value pairs")
	}
	keys := make([]string, 0, len(notes))
	for k := range notes {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the error names the same pair every time
	var seen rail.KeySet
	for _, k := range keys {
		if err := seen.Add(k); err != nil {
			return malformed("notes", "%v", err)
		}
	}
	delete(notes, sik.StampKey)
	if len(notes) > maxNotes-1 {
		return malformed("notes", "%d keys; at most %d, as Countersign adds %s", len(notes), maxNotes-1, sik.StampKey)
	}
	for k, v := range notes {
		var s string
		if json.Unmarshal(v, &s) != nil || string(v) == "null" {
			return malformed("notes", "value of %q is %.40s; notes values are strings", k, v)
		}
		if len(s) > maxNoteValLen {
			return malformed("notes", "value of %q is longer than %d bytes", k, maxNoteValLen)
		}
	}
	return nil
}

// sentStamp is the value checked notes carry under the stamp key, as sent
// (a value that is not a string as its JSON text), "" when none.
func sentStamp(raw json.RawMessage) string {
	var notes map[string]json.RawMessage
	if json.Unmarshal(raw, &notes) != nil {
		return ""
	}
	v, ok := notes[sik.StampKey]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

// readNotes returns checked notes as strings, the stamp excluded.
func readNotes(raw json.RawMessage) (map[string]string, error) {
	if err := checkNotes(raw); err != nil || string(raw) == "null" {
		return nil, err
	}
	var notes map[string]string
	if err := json.Unmarshal(raw, &notes); err != nil {
		return nil, malformed("notes", "must be an object of key-value pairs")
	}
	delete(notes, sik.StampKey)
	return notes, nil
}

// extra is the key's Extra: every roleKey member's effective value, an
// explicit default dropped unless the member keys its default.
func (s spec) extra(f map[string]string) map[string]string {
	extra := map[string]string{}
	for name, m := range s.members {
		if m.role != roleKey {
			continue
		}
		sent, present := f[name]
		if v, keyed := (rail.KeyMember{Default: m.dflt, KeyDefault: m.keyDefault}).Keyed(sent, present); keyed {
			extra[name] = v
		}
	}
	return extra
}

// required names the first required member missing, in a fixed order.
func (s spec) missing(f map[string]string, order ...string) error {
	for _, name := range order {
		if _, ok := f[name]; !ok && s.members[name].required {
			return malformed(name, "required")
		}
	}
	return nil
}
