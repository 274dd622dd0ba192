package logging

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOutageLogsOneLineEachWay(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	o := &Outage{Log: New(&buf, "text", "info"), What: "reconcile", Now: func() time.Time { return now }}
	o.Observe(nil) // working from the start: nothing to say
	down := errors.New("failed to connect to `user=countersign`:\n\t127.0.0.1:5432: dial error: connection refused")
	for range 30 {
		o.Observe(down)
		now = now.Add(time.Second)
	}
	o.Observe(nil)
	o.Observe(nil)
	o.Observe(down)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines for two outages, want 3 (down, up, down):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "reconcile: failing") || !strings.Contains(lines[0], "dial error: connection refused") {
		t.Errorf("first line = %s", lines[0])
	}
	if !strings.Contains(lines[1], "reconcile: working again") || !strings.Contains(lines[1], "down_for=30s") || !strings.Contains(lines[1], "failed_tries=30") {
		t.Errorf("second line = %s", lines[1])
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine(errors.New("a:\n\tb  c")); got != "a: b c" {
		t.Fatalf("OneLine = %q", got)
	}
}
