package rail

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// chainThenArrays is a body of about size bytes: objects nested depth-1
// deep under names that fill half of it, then an array of empty arrays.
// A checker that builds each container's path copies the long names once
// for every empty array.
func chainThenArrays(size, depth int) []byte {
	depth--
	name := size/2/(depth-1) - 6
	var b strings.Builder
	for i := range depth - 1 {
		b.WriteString(`{"` + strings.Repeat(string(rune('a'+i%26)), name) + `":`)
	}
	b.WriteString("[")
	for b.Len()+3+depth < size {
		b.WriteString("[],")
	}
	return []byte(strings.TrimSuffix(b.String(), ",") + "]" + strings.Repeat("}", depth-1))
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// What CheckStrictJSON allocates grows with the body, not with the body
// times its nesting: a request body of 64 KiB, read before the agent's
// credential is looked at, allocated 360 MB (found by a review: names of
// 32 KiB down one chain of objects, then 10,900 empty arrays, each
// opening with a copy of the chain's path). The bound is a multiple of
// the body's size, not a time.
func TestCheckStrictJSONCostIsLinear(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts StrictJSON
	}{
		{"a Razorpay body", StrictJSON{Object: true, MaxDepth: 32, ExactNames: true}},
		{"an MCP message", StrictJSON{MaxDepth: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := chainThenArrays(64<<10, tc.opts.MaxDepth)
			var err error
			n := allocated(func() { err = CheckStrictJSON(body, tc.opts) })
			if err != nil {
				t.Fatalf("the body is refused: %v", err)
			}
			if limit := uint64(64 * len(body)); n > limit {
				t.Fatalf("checking %d bytes allocated %d bytes, more than %d", len(body), n, limit)
			}
		})
	}
	// The path of a member sent twice is still named whole.
	body := []byte(`{"a":[{"b":{"c":1,"C":2}}]}`)
	err := CheckStrictJSON(body, StrictJSON{})
	var je *JSONError
	if !errors.As(err, &je) || je.Fault != JSONTwice || je.Path != "a[].b.C" {
		t.Fatalf("%v; want C sent twice at a[].b.C", err)
	}
}
