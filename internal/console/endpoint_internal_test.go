package console

import "testing"

// An issuer endpoint over plain http is allowed to loopback, except in the
// agent's pod, whose loopback the agent shares.
func TestCheckEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		url       string
		ok, okPod bool
	}{
		{name: "https", url: "https://id.example/token", ok: true, okPod: true},
		{name: "https on loopback", url: "https://localhost:8443/token", ok: true, okPod: true},
		{name: "http on localhost", url: "http://localhost:5556/token", ok: true},
		{name: "http on 127.0.0.1", url: "http://127.0.0.1:5556/token", ok: true},
		{name: "http on ::1", url: "http://[::1]:5556/token", ok: true},
		{name: "http elsewhere", url: "http://id.example/token"},
		{name: "not absolute", url: "/token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkEndpoint(tc.url, false); (err == nil) != tc.ok {
				t.Errorf("checkEndpoint(%q, outside the pod) = %v, want ok=%v", tc.url, err, tc.ok)
			}
			if err := checkEndpoint(tc.url, true); (err == nil) != tc.okPod {
				t.Errorf("checkEndpoint(%q, in the agent's pod) = %v, want ok=%v", tc.url, err, tc.okPod)
			}
		})
	}
}
