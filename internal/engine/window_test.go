package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
)

// TestWindowCurrent: an aliased intent answers a request from the ledger
// only within the idempotency window folded into its key; a key whose
// window cannot be read never does (the request is keyed afresh).
func TestWindowCurrent(t *testing.T) {
	at := time.Unix(1_800_000_000, 500_000_000)
	e := &Engine{now: func() time.Time { return at }}
	bucket := at.UnixNano() / int64(time.Minute)
	cases := []struct {
		canonical string
		want      bool
	}{
		{`{"window":""}`, true},
		{`{}`, true},
		{fmt.Sprintf(`{"window":"1m0s@%d"}`, bucket), true},
		{fmt.Sprintf(`{"window":"1m0s@%d"}`, bucket-1), false},
		{fmt.Sprintf(`{"window":"1m0s@%d"}`, bucket+1), false},
		{`{"window":"1m0s"}`, false},
		{`{"window":"soon@1"}`, false},
		{`{"window":"1m0s@x"}`, false},
		{`{"window":"0s@0"}`, false},
		{`{"window":"-1m0s@0"}`, false},
		{`not json`, false},
	}
	for _, tc := range cases {
		if got := e.windowCurrent(ledger.Intent{Canonical: tc.canonical}); got != tc.want {
			t.Errorf("windowCurrent(%s) = %v, want %v", tc.canonical, got, tc.want)
		}
	}
}
