package secrets

import (
	"bytes"
	"runtime"
	"testing"
)

// What reading an event stream allocates grows with the stream, a few
// copies of it, not with a record per line (found by a review: an answer
// of four million line breaks, held as a slice of lines, allocated 650 MiB
// and held 450 MiB at once; the sidecar's limit is 256 MiB). The bound is
// a multiple of the body's size, not a time.
func TestScrubEventStreamCostIsLinear(t *testing.T) {
	for name, body := range map[string][]byte{
		"line breaks":    bytes.Repeat([]byte("\n"), 4_000_000),
		"small events":   bytes.Repeat([]byte("data: {}\n\n"), 400_000),
		"comment events": bytes.Repeat([]byte(":\n\n"), 1_000_000),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := ScrubEventStream(body)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n, limit := after.TotalAlloc-before.TotalAlloc, uint64(16*len(body)); n > limit {
			t.Errorf("%s: scrubbing %d bytes allocated %d, more than %d", name, len(body), n, limit)
		}
	}
}
