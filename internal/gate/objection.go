package gate

// objectionVerdict is what an objection asks for. It is unexported and
// has no value meaning ALLOW: an advisor can object, never upgrade.
type objectionVerdict uint8

const (
	objectBlock objectionVerdict = iota // the zero value: a malformed objection blocks
	objectHold
)

// Objection is an advisory gate's objection to an action. Its fields are
// unexported, so outside this package an Objection is either the zero
// value, which blocks, or made by [HoldFor] or [BlockFor]. A nil *Objection
// is no objection: it leaves the verdict as the other gates made it.
type Objection struct {
	verdict objectionVerdict
	code    string
	reason  string
}

// HoldFor objects by holding the action for the owner, with a snake_case
// reason code and a sentence the agent can act on.
func HoldFor(code, reason string) *Objection {
	return &Objection{verdict: objectHold, code: code, reason: reason}
}

// BlockFor objects by blocking the action.
func BlockFor(code, reason string) *Objection {
	return &Objection{verdict: objectBlock, code: code, reason: reason}
}

// Verdict is Hold or Block; nothing else is expressible.
func (o Objection) Verdict() Verdict {
	if o.verdict == objectHold {
		return Hold
	}
	return Block
}

// Code is the objection's reason code (advisory_objection when it gave none).
func (o Objection) Code() string {
	if o.code == "" {
		return ReasonAdvisoryObjection
	}
	return o.code
}

// Reason is the objection's sentence.
func (o Objection) Reason() string {
	if o.reason == "" {
		return "An advisory gate objected without saying why."
	}
	return o.reason
}
