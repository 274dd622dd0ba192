package demo

import (
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"testing"
)

func TestMajor(t *testing.T) {
	cases := []struct {
		name     string
		minor    int64
		currency string
		want     string
	}{
		{"cents", 5, "USD", "0.05 USD"},
		{"below a thousand", 60000, "USD", "600.00 USD"},
		{"thousands", 250000, "USD", "2,500.00 USD"},
		{"millions", 123456789, "INR", "1,234,567.89 INR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := major(tc.minor, tc.currency); got != tc.want {
				t.Errorf("major(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.want)
			}
		})
	}
}

func TestNewRunNamesFreshPayments(t *testing.T) {
	id := regexp.MustCompile(`^[A-Za-z0-9_]+$`) // what both rails' adapters accept in a path or a form value
	a, b := newRun(3), newRun(3)
	for _, r := range []run{a, b} {
		if !id.MatchString(r.StripePayment) || !id.MatchString(r.RazorpayPayment) ||
			!regexp.MustCompile(`^pi_demo_3_`).MatchString(r.StripePayment) || !regexp.MustCompile(`^pay_demo_3_`).MatchString(r.RazorpayPayment) {
			t.Fatalf("run ids %q, %q", r.StripePayment, r.RazorpayPayment)
		}
	}
	// Two runs with the same number (a removed demo.json) still meet none of each other's intents.
	if a.StripePayment == b.StripePayment {
		t.Fatalf("two runs share payment %s", a.StripePayment)
	}
}

func TestServedHosts(t *testing.T) {
	cases := []struct {
		name string
		addr *net.TCPAddr
		want []string
	}{
		{"loopback answers to localhost too", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 15001}, []string{"127.0.0.1:15001", "localhost:15001"}},
		{"IPv6 loopback", &net.TCPAddr{IP: net.IPv6loopback, Port: 15002}, []string{"[::1]:15002", "localhost:15002"}},
		{"another address only as itself", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 15001}, []string{"10.1.2.3:15001"}},
		{"every address: any host", &net.TCPAddr{IP: net.IPv4zero, Port: 15001}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := servedHosts(tc.addr); !slices.Equal(got, tc.want) {
				t.Errorf("servedHosts(%s) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
}

// TestUnknownHostBody: each listener answers an unserved Host in its rail's
// error shape, naming every served host.
func TestUnknownHostBody(t *testing.T) {
	stripe := &egressRail{Name: "Stripe", Account: devStripeAccount, RailHost: stripeHost, Hosts: []string{"127.0.0.1:15001", "localhost:15001"}}
	razorpay := &egressRail{Name: "Razorpay", Account: devRazorpayAccount, RailHost: razorpayHost, Hosts: []string{"127.0.0.1:15002"}}
	rails := []*egressRail{stripe, razorpay}
	type served struct{ Host, Rail, RailAccount string }
	type railError struct {
		Type, Code, Message, Description string
		ServedHosts                      []struct {
			Host        string `json:"host"`
			Rail        string `json:"rail"`
			RailAccount string `json:"rail_account"`
		} `json:"served_hosts"`
	}
	cases := []struct {
		name              string
		on                *egressRail
		wantType, wantMsg string
		wantCode          string
	}{
		{"Stripe's shape: type, code, message", stripe, "invalid_request_error", "message", "countersign_unknown_host"},
		{"Razorpay's shape: code, description", razorpay, "", "description", "BAD_REQUEST_ERROR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body struct{ Error railError }
			if err := json.Unmarshal([]byte(unknownHostBody(tc.on, rails)), &body); err != nil {
				t.Fatal(err)
			}
			e := body.Error
			text := e.Message
			if tc.wantMsg == "description" {
				text = e.Description
			}
			if e.Type != tc.wantType || e.Code != tc.wantCode || text == "" {
				t.Fatalf("error %+v", e)
			}
			for _, h := range []string{"http://127.0.0.1:15001", "http://localhost:15001", "http://127.0.0.1:15002"} {
				if !regexp.MustCompile(regexp.QuoteMeta(h) + `\b`).MatchString(text) {
					t.Errorf("%q does not name %s", text, h)
				}
			}
			var got []served
			for _, s := range e.ServedHosts {
				got = append(got, served{s.Host, s.Rail, s.RailAccount})
			}
			want := []served{{"127.0.0.1:15001", "stripe", devStripeAccount}, {"localhost:15001", "stripe", devStripeAccount}, {"127.0.0.1:15002", "razorpay", devRazorpayAccount}}
			if !slices.Equal(got, want) {
				t.Errorf("served_hosts %v, want %v", got, want)
			}
		})
	}
}

func TestCLICommand(t *testing.T) {
	for _, tc := range []struct{ exe, wd, want string }{
		{"/src/countersign/bin/countersign-dev", "/src/countersign", "./bin/countersign-dev"},
		{"/opt/bin/countersign-dev", "/src/countersign", "/opt/bin/countersign-dev"},
		{"/tmp/go-build123/b001/exe/countersign-dev", "/src/countersign", "go run ./cmd/countersign"},
		{"", "/src", "go run ./cmd/countersign"},
	} {
		if got := cliCommand(tc.exe, tc.wd); got != tc.want {
			t.Errorf("cliCommand(%q, %q) = %q, want %q", tc.exe, tc.wd, got, tc.want)
		}
	}
}
