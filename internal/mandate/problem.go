package mandate

import (
	"fmt"
	"sort"
	"strings"
)

// Problem is one thing wrong with a mandate.
type Problem struct {
	// Line and Column locate the problem in the YAML source, from 1. Both are
	// 0 for a mandate that did not come from YAML (see [Validate]).
	Line, Column int
	// Field is the path of the field, e.g. grants[0].max_amount_minor;
	// empty for the mandate as a whole.
	Field string
	// Message says what is wrong and, where it helps, what to write instead.
	Message string
	// Rule is the protovalidate rule id or the mandate check that failed
	// (e.g. mandate.validity); empty for syntax and type problems.
	Rule string
}

// FieldName is Field, or "mandate" for a problem with the whole mandate.
func (p Problem) FieldName() string {
	if p.Field == "" {
		return "mandate"
	}
	return p.Field
}

// String is "LINE:COL: field: message", or "field: message" without a position.
func (p Problem) String() string {
	if p.Line == 0 {
		return p.FieldName() + ": " + p.Message
	}
	return fmt.Sprintf("%d:%d: %s: %s", p.Line, p.Column, p.FieldName(), p.Message)
}

// Error is the error Parse and Validate return: every problem found, in
// source order.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid mandate")
	if len(e.Problems) == 1 {
		b.WriteString(": ")
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, " (%d problems):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		if ps[i].Column != ps[j].Column {
			return ps[i].Column < ps[j].Column
		}
		return ps[i].Field < ps[j].Field
	})
}
