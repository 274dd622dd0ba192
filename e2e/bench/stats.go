// Package bench is `make bench`: in one run it measures the commit floor of
// the PostgreSQL it uses (pgbench), the ALLOW and BLOCK paths of a real
// `countersign serve` through Envoy's ext_authz and ext_proc protocols at
// 1, 16 and 64 callers under many mandates and under one hot mandate, what
// one decision costs the database (statements, transactions, WAL bytes,
// client round trips), and the idle memory and start-up time of the
// process; it writes its section of RESULTS.md.
//
// The measuring test runs only when COUNTERSIGN_BENCH is set (make bench
// sets it); the small tests of its helpers run with every `make test`.
package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile is the nearest-rank p-quantile (0 < p ≤ 1) of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// latencies summarises one cell's latencies.
type latencies struct {
	n        int
	p50, p99 time.Duration
}

func summarise(d []time.Duration) latencies {
	s := slices.Clone(d)
	slices.Sort(s)
	return latencies{n: len(s), p50: percentile(s, 0.50), p99: percentile(s, 0.99)}
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
}

// pct formats a ratio as a percentage.
func pct(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "–"
	}
	return strconv.FormatFloat(100*r, 'f', 1, 64) + " %"
}

// per formats total/n with two decimals.
func per(total int64, n int) string {
	if n == 0 {
		return "–"
	}
	return strconv.FormatFloat(float64(total)/float64(n), 'f', 2, 64)
}

// perWhole formats total/n rounded to a whole number.
func perWhole(total int64, n int) string {
	if n == 0 {
		return "–"
	}
	return strconv.FormatFloat(float64(total)/float64(n), 'f', 0, 64)
}

// parseLSN reads a PostgreSQL WAL location ("16/B374D848") as a byte
// position.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("bench: %q is not a WAL location", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bench: %q is not a WAL location", s)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bench: %q is not a WAL location", s)
	}
	return h<<32 | l, nil
}

// table renders a Markdown table.
func table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(header)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}
