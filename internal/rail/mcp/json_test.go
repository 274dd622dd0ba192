package mcp

import (
	"errors"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestCheckJSONText: checkJSON takes any one JSON value, folds case, and
// names the member sent twice by its path, or the body.
func TestCheckJSONText(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string // want "" for accepted
	}{
		{"an array is a value", `[{"a":1}]`, ""},
		{"64 deep", `{"a":` + nest(63) + `}`, ""},
		{"65 deep", `{"a":` + nest(64) + `}`, "malformed request: body: nested deeper than 64"},
		{"after the message", `{"jsonrpc":"2.0"} {}`, "malformed request: body: data after the JSON-RPC message"},
		{"twice in case, deep", `{"params":{"arguments":{"amount":1,"AMOUNT":2}}}`,
			`malformed request: params.arguments.AMOUNT: sent twice in one object (as "amount" and "AMOUNT": servers that ignore case read them as one)`},
		{"twice in an array", `{"params":[{"a":1,"a":2}]}`, "malformed request: params[].a: sent twice in one object"},
		{"lone surrogate", `{"a":"\ud800"}`, "malformed request: body: " + rail.ErrLoneSurrogate.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkJSON([]byte(tc.body))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkJSON(%.60q) = %v, want it accepted", tc.body, err)
				}
				return
			}
			if err == nil || err.Error() != "rail: "+tc.want || !errors.Is(err, rail.ErrMalformed) {
				t.Errorf("checkJSON(%.60q) = %v, want %q wrapping rail.ErrMalformed", tc.body, err, "rail: "+tc.want)
			}
		})
	}
}

func nest(n int) string {
	s := "1"
	for range n {
		s = "[" + s + "]"
	}
	return s
}
