package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestRedaction(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log := New(&buf, format, "debug")
			log.Info("check", "authorization", "Bearer sk_live_abc", "rail_key", "rzp_secret",
				slog.Group("req", slog.String("cookie", "sid=1"), slog.String("path", "/v1/refunds")),
				"agent_credential", "csk_zzz")
			out := buf.String()
			for _, secret := range []string{"sk_live_abc", "rzp_secret", "sid=1", "csk_zzz"} {
				if strings.Contains(out, secret) {
					t.Errorf("log leaked %q: %s", secret, out)
				}
			}
			if !strings.Contains(out, "/v1/refunds") {
				t.Errorf("non-secret attribute lost: %s", out)
			}
		})
	}
}

func TestIsSensitive(t *testing.T) {
	cases := map[string]bool{
		"Authorization": true, "cookie": true, "x-api-key": true, "agent_credential": true,
		"path": false, "host": false, "reason": false, "credential_id_count": false,
	}
	for k, want := range cases {
		if got := IsSensitive(k); got != want {
			t.Errorf("IsSensitive(%q) = %v, want %v", k, got, want)
		}
	}
}
