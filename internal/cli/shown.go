package cli

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/countersign/countersign/internal/sik"
)

// shown is s as the CLI prints text it did not write (what an agent's
// request carried, a rail's message, a server's answer): as it is when
// every character prints as itself, else quoted in Go syntax, so no
// terminal escape, line break, tab or invisible character (a bidi
// override, a C1 control) of it can move the cursor, redraw a row or
// hide what the owner approves (found by a review: a held transfer's
// subject rewrote the real hold's amount in `approvals list`).
func shown(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || sik.Hidden(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
