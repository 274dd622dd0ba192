package rails

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

// TestPayoutAccountNumbers: payout_account_numbers is read from the rails
// file on a REST razorpay account (digits, 9 to 18 of them, no duplicates,
// not empty) and refused, with the reason, anywhere else.
func TestPayoutAccountNumbers(t *testing.T) {
	dir := t.TempDir()
	rzpKey, skKey := filepath.Join(dir, "rzp"), filepath.Join(dir, "sk")
	if err := os.WriteFile(rzpKey, []byte("rzp_test_x:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(skKey, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{
		sik.RailStripe:   func() rail.Adapter { return stripe.New() },
		sik.RailRazorpay: func() rail.Adapter { return razorpay.New() },
	}
	const rzp = "rails:\n- account: rzp_1\n  rail: razorpay\n  hosts: [api.razorpay.com]\n  key_file: " // + key
	for _, tc := range []struct {
		name, file string
		wantErr    string
		listed     int
	}{
		{name: "unset", file: rzp + rzpKey + "\n"},
		{name: "one", file: rzp + rzpKey + "\n  payout_account_numbers: [\"7878780080316316\"]\n", listed: 1},
		{name: "bounds", file: rzp + rzpKey + "\n  payout_account_numbers: [\"123456789\", \"123456789012345678\"]\n", listed: 2},
		{name: "empty", file: rzp + rzpKey + "\n  payout_account_numbers: []\n",
			wantErr: "rails[0] (rzp_1): payout_account_numbers is empty: list the RazorpayX account numbers payouts may leave from, or leave it out to let the agent choose"},
		{name: "letters", file: rzp + rzpKey + "\n  payout_account_numbers: [\"acc_7878780080316316\"]\n",
			wantErr: `rails[0] (rzp_1): payout_account_numbers[0] "acc_7878780080316316" is not a RazorpayX account number: 9 to 18 digits (the current account number, or the RazorpayX Lite customer identifier, from the RazorpayX Dashboard, quoted: YAML reads an unquoted 0123… as another number)`},
		{name: "short", file: rzp + rzpKey + "\n  payout_account_numbers: [\"7878780080316316\", \"12345678\"]\n",
			wantErr: `payout_account_numbers[1] "12345678" is not a RazorpayX account number: 9 to 18 digits`},
		{name: "long", file: rzp + rzpKey + "\n  payout_account_numbers: [\"1234567890123456789\"]\n",
			wantErr: `payout_account_numbers[0] "1234567890123456789" is not a RazorpayX account number: 9 to 18 digits`},
		{name: "space", file: rzp + rzpKey + "\n  payout_account_numbers: [\" 7878780080316316\"]\n",
			wantErr: `payout_account_numbers[0] " 7878780080316316" is not a RazorpayX account number`},
		{name: "unquoted", file: rzp + rzpKey + "\n  payout_account_numbers: [7878780080316316]\n", listed: 1},
		{name: "unquoted leading zero", file: rzp + rzpKey + "\n  payout_account_numbers: [0012345678]\n",
			wantErr: `payout_account_numbers[0] "1.2345678e+07" is not a RazorpayX account number: 9 to 18 digits (the current account number, or the RazorpayX Lite customer identifier, from the RazorpayX Dashboard, quoted: YAML reads an unquoted 0123… as another number)`},
		{name: "duplicate", file: rzp + rzpKey + "\n  payout_account_numbers: [\"7878780080316316\", \"2323230041626905\", \"7878780080316316\"]\n",
			wantErr: `rails[0] (rzp_1): payout_account_numbers[2] "7878780080316316" is listed twice`},
		{name: "stripe", file: "rails:\n- account: acct_1\n  rail: stripe\n  hosts: [api.stripe.com]\n  key_file: " + skKey + "\n  payout_account_numbers: [\"7878780080316316\"]\n",
			wantErr: "rails[0] (acct_1): payout_account_numbers is for razorpay accounts (a RazorpayX payout's account_number); a stripe payout names no source account to check"},
		{name: "razorpay mcp", file: "rails:\n- account: rzp_mcp\n  rail: razorpay\n  hosts: [mcp.razorpay.com]\n  base_url: https://api.razorpay.com\n  key_file: " + rzpKey +
			"\n  mcp: {preset: razorpay}\n  payout_account_numbers: [\"7878780080316316\"]\n",
			wantErr: `rails[0] (rzp_mcp): payout_account_numbers: this account's hosts are a payment MCP server (mcp.preset "razorpay"), which has no payout-creating tool; set it on the razorpay account that guards the REST API (api.razorpay.com)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rails.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := Load(path, adapters, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := r.Accounts()[0]
			if _, listed := a.PayoutSource("7878780080316316"); listed != tc.listed {
				t.Fatalf("%d source accounts listed, want %d", listed, tc.listed)
			}
		})
	}
}

// TestPayoutSource: with a list, only a listed account number passes (an
// empty one, a prefix or one with more digits do not); without, any does.
func TestPayoutSource(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("rzp_test_x:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailRazorpay: func() rail.Adapter { return razorpay.New() }}
	r, err := New(File{Rails: []AccountConfig{
		{Account: "listed", Rail: "razorpay", Hosts: []string{"api.razorpay.com"}, KeyFile: key, PayoutAccountNumbers: []string{"7878780080316316", "2323230041626905"}},
		{Account: "open", Rail: "razorpay", Hosts: []string{"api2.razorpay.com"}, KeyFile: key},
	}}, adapters, nil)
	if err != nil {
		t.Fatal(err)
	}
	listed, _ := r.ByID("listed")
	open, _ := r.ByID("open")
	for _, tc := range []struct {
		number     string
		listedOK   bool
		openListed int
	}{
		{number: "7878780080316316", listedOK: true},
		{number: "2323230041626905", listedOK: true},
		{number: "78787800803163160"},
		{number: "787878008031631"},
		{number: ""},
		{number: "acc_1"},
	} {
		t.Run(tc.number, func(t *testing.T) {
			if ok, n := listed.PayoutSource(tc.number); ok != tc.listedOK || n != 2 {
				t.Errorf("listed: PayoutSource = %v, %d; want %v, 2", ok, n, tc.listedOK)
			}
			if ok, n := open.PayoutSource(tc.number); !ok || n != 0 {
				t.Errorf("open: PayoutSource = %v, %d; want true, 0", ok, n)
			}
		})
	}
	w := r.Warnings()
	if len(w) != 1 || !strings.HasPrefix(w[0], "rail account open: razorpay without payout_account_numbers:") {
		t.Fatalf("Warnings = %q; want one, about the open account", w)
	}
}
