package gate

import (
	"fmt"
	"unicode"
)

// Result constructors for the gates.

func pass(gate, format string, args ...any) Result {
	return result(gate, Allow, ReasonPassed, format, args...)
}

func block(gate, code, format string, args ...any) Result {
	return result(gate, Block, code, format, args...)
}

func hold(gate, code, format string, args ...any) Result {
	return result(gate, Hold, code, format, args...)
}

// result builds a Result whose reason starts with a capital letter, as a
// sentence shown to the agent does.
func result(gate string, v Verdict, code, format string, args ...any) Result {
	reason := []rune(fmt.Sprintf(format, args...))
	if len(reason) > 0 {
		reason[0] = unicode.ToUpper(reason[0])
	}
	return Result{Gate: gate, Verdict: v, ReasonCode: code, Reason: string(reason)}
}
