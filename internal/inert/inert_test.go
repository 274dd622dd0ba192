package inert

import (
	"net/url"
	"strings"
	"testing"
)

// TestText: free text keeps its words and ordinary punctuation, and loses
// every character a dashboard, Slack or Markdown reads as markup.
func TestText(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"stripe message", "No such payment_intent: 'pi_123'", "No such payment_intent: 'pi_123'"},
		{"razorpay description", "The amount must be at least INR 1.00 (100 paise).", "The amount must be at least INR 1.00 (100 paise)."},
		{"slack link", "Invalid key <https://x.example/a|APPROVE>", "Invalid key %3Chttps://x.example/a%7CAPPROVE%3E"},
		{"html", "<img src=x onerror=alert(1)>", "%3Cimg src%3Dx onerror%3Dalert(1)%3E"},
		{"markdown link", "[APPROVE](https://x.example)", "%5BAPPROVE%5D(https://x.example)"},
		{"quotes backtick backslash", "a\"b`c\\d", "a%22b%60c%5Cd"},
		{"line breaks and controls", "a\nb\r\tc\x00\x1b\x7f", "a%0Ab%0D%09c%00%1B%7F"},
		{"percent itself", "100%", "100%25"},
		{"bidi override", "a\u202eb", "a%E2%80%AEb"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(tc.in)
			if got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if back, err := url.PathUnescape(got); err != nil || back != tc.in {
				t.Errorf("Text(%q) = %q does not decode back (%q, %v)", tc.in, got, back, err)
			}
		})
	}
}

// FuzzText: whatever the input, the output holds only the bytes Text keeps
// and '%' escapes, none of them markup, and decodes back to the input.
func FuzzText(f *testing.F) {
	f.Add("<https://x.example|APPROVE> <img src=x>")
	f.Add("a\x00b\u202ec%")
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		for i := 0; i < len(got); i++ {
			if !TextByte(got[i]) && got[i] != '%' {
				t.Fatalf("Text(%q) = %q keeps byte %#x", s, got, got[i])
			}
		}
		if strings.ContainsAny(got, "<>|\"`\\\n\r[]*~&!#") {
			t.Fatalf("Text(%q) = %q keeps markup", s, got)
		}
		if back, err := url.PathUnescape(got); err != nil || back != s {
			t.Fatalf("Text(%q) = %q decodes to %q, %v", s, got, back, err)
		}
	})
}
