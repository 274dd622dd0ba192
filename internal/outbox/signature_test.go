package outbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWebhookSignatureVerify(t *testing.T) {
	const secret = "whsec_test_0123456789"
	body := []byte(`{"event":"intent.applied","id":"1"}`)
	now := time.Unix(1_800_000_000, 0)
	good := Sign(secret, now, body)
	_, v1, _ := strings.Cut(good, ",")
	cases := []struct {
		name      string
		secret    string
		header    string
		body      []byte
		tolerance time.Duration
		at        time.Time
		want      error
	}{
		{"valid", secret, good, body, time.Minute, now, nil},
		{"valid, a little clock skew", secret, good, body, time.Minute, now.Add(-59 * time.Second), nil},
		{"valid, default tolerance", secret, good, body, 0, now.Add(4 * time.Minute), nil},
		{"rotated: one of two v1 matches", secret, Sign("whsec_old_secret_000000", now, body) + "," + v1, body, time.Minute, now, nil},
		{"wrong secret", "whsec_other_0123456789", good, body, time.Minute, now, ErrSignatureMismatch},
		{"body changed", secret, good, []byte(`{"event":"intent.applied","id":"2"}`), time.Minute, now, ErrSignatureMismatch},
		{"timestamp changed", secret, strings.Replace(good, "t=1800000000", "t=1800000001", 1), body, time.Minute, now, ErrSignatureMismatch},
		{"too old (a replay)", secret, good, body, time.Minute, now.Add(2 * time.Minute), ErrSignatureExpired},
		{"too old for the default", secret, good, body, 0, now.Add(6 * time.Minute), ErrSignatureExpired},
		{"from the future", secret, good, body, time.Minute, now.Add(-2 * time.Minute), ErrSignatureExpired},
		{"no v1", secret, "t=1800000000", body, time.Minute, now, ErrSignatureMalformed},
		{"no t", secret, v1, body, time.Minute, now, ErrSignatureMalformed},
		{"two t", secret, "t=1800000000," + good, body, time.Minute, now, ErrSignatureMalformed},
		{"v1 not hex", secret, "t=1800000000,v1=zz", body, time.Minute, now, ErrSignatureMalformed},
		{"v1 too short", secret, "t=1800000000,v1=abcd", body, time.Minute, now, ErrSignatureMalformed},
		{"empty", secret, "", body, time.Minute, now, ErrSignatureMalformed},
		{"garbage", secret, "sha256=abc", body, time.Minute, now, ErrSignatureMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.secret, tc.header, tc.body, tc.tolerance, tc.at)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestWebhookSignatureFormat(t *testing.T) {
	sig := Sign("whsec_test_0123456789", time.Unix(1_700_000_000, 0), []byte("{}"))
	if !strings.HasPrefix(sig, "t=1700000000,v1=") || len(sig) != len("t=1700000000,v1=")+64 {
		t.Fatalf("Sign = %q", sig)
	}
}

func TestDeliveryBackoffIsFullJitterUnderAnExponentialCeiling(t *testing.T) {
	ceilings := func(jitter func(int64) int64) []time.Duration {
		w := (&Dispatcher{BaseBackoff: time.Second, MaxBackoff: 10 * time.Second, jitter: jitter}).settings()
		var out []time.Duration
		for n := 1; n <= 6; n++ {
			out = append(out, w.backoff(n))
		}
		return out
	}
	cases := []struct {
		name   string
		jitter func(int64) int64
		want   []time.Duration
	}{
		{"largest draw is the ceiling", func(n int64) int64 { return n - 1 },
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"smallest draw is no wait", func(int64) int64 { return 0 }, []time.Duration{0, 0, 0, 0, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ceilings(tc.jitter)
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("backoffs = %v, want %v", got, tc.want)
				}
			}
		})
	}
	// The real jitter stays within [0, ceiling].
	w := (&Dispatcher{BaseBackoff: time.Second, MaxBackoff: 10 * time.Second}).settings()
	for range 1000 {
		if d := w.backoff(3); d < 0 || d > 4*time.Second {
			t.Fatalf("backoff(3) = %s, outside [0, 4s]", d)
		}
	}
}

func TestWebhookNewSecret(t *testing.T) {
	a, errA := NewSecret()
	b, errB := NewSecret()
	if errA != nil || errB != nil || a == b || !strings.HasPrefix(a, "whsec_") || len(a) != len("whsec_")+64 {
		t.Fatalf("NewSecret = %q, %q (%v, %v)", a, b, errA, errB)
	}
}
