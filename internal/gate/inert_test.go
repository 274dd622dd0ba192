package gate

import (
	"net/url"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// markup is what must not survive into a reason from the agent: HTML,
// Slack link and mention syntax, quotes, Markdown code, and line breaks.
const markup = "<>|\"'`&*\\\n\r\t\x00\x1b\x7f "

// inert leaves ordinary names alone and percent-encodes everything else,
// reversibly, so the owner can still tell which member it was.
func TestInert(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"stripe metadata key", "metadata[order_id]", "metadata[order_id]"},
		{"razorpay note", "notes.order-7", "notes.order-7"},
		{"nested stripe key", "transfer_data[destination]", "transfer_data[destination]"},
		{"empty", "", ""},
		{"html", "metadata[<img src=x onerror=alert(1)>]", "metadata[%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E]"},
		{"slack link", "metadata[<https://x.co|APPROVE>]", "metadata[%3Chttps%3A%2F%2Fx.co%7CAPPROVE%3E]"},
		{"newline and quotes", "a\n\"b'`c", "a%0A%22b%27%60c"},
		{"percent itself", "100%", "100%25"},
		{"non-ASCII", "café", "caf%C3%A9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inert(tc.in)
			if got != tc.want {
				t.Errorf("inert(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if back, err := url.PathUnescape(got); err != nil || back != tc.in {
				t.Errorf("inert(%q) = %q does not decode back (%q, %v)", tc.in, got, back, err)
			}
		})
	}
}

func FuzzInert(f *testing.F) {
	f.Add("metadata[<img src=x onerror=alert(1)>]")
	f.Add("a\x00b\u202ec")
	f.Fuzz(func(t *testing.T, s string) {
		got := inert(s)
		for i := 0; i < len(got); i++ {
			if !inertByte(got[i]) && got[i] != '%' {
				t.Fatalf("inert(%q) = %q keeps byte %#x", s, got, got[i])
			}
		}
		if back, err := url.PathUnescape(got); err != nil || back != s {
			t.Fatalf("inert(%q) = %q decodes to %q, %v", s, got, back, err)
		}
	})
}

// Every reason that names agent-chosen text (a label member, a payee, a
// subject, a currency, a host, an API version, an MCP tool) renders it
// inert: a reason leaves in the signed intent.held webhook, whose receiver
// may show it in a dashboard, Slack or a model's prompt. Each case is run
// with a plain value and with a hostile one: the hostile reason must name
// the value encoded and carry no more markup than the plain one (the
// sentence's own apostrophes and quotes).
func TestReasonsRenderAgentTextInert(t *testing.T) {
	const evil = `<img src=x onerror=alert(1)>|"'` + "`\n<https://x.co|APPROVE>"
	hold := func(member string) func(in *Input) {
		return func(in *Input) {
			in.Mandate.FreeText = countersignv1.FreeText_FREE_TEXT_HOLD
			in.Labels, in.FreeText = `{"metadata[order_id]":"7"}`, []string{member, "metadata[order_id]"}
		}
	}
	for _, tc := range []struct {
		name  string
		base  func() Input
		mod   func(in *Input, v string)
		check func(Input) Result
		code  string
	}{
		{name: "free text held", base: refundIn, mod: func(in *Input, v string) { hold("metadata[" + v + "]")(in) }, check: CheckScope, code: ReasonFreeTextHeld},
		{name: "free text refused", base: refundIn, mod: func(in *Input, v string) {
			hold("metadata[" + v + "]")(in)
			in.Mandate.FreeText = countersignv1.FreeText_FREE_TEXT_REFUSE
		}, check: CheckScope, code: ReasonFreeTextRefused},
		{name: "approved labels changed", base: refundIn, mod: func(in *Input, v string) {
			hold("metadata[" + v + "]")(in)
			approve(in)
			in.ApprovedLabels, in.Labels = `{"metadata[order_id]":"7"}`, `{"metadata[order_id]":"7",`+jsonString("metadata["+v+"]")+`:"x"}`
		}, check: CheckScope, code: ReasonFreeTextHeld},
		{name: "payee not allowed", base: payoutIn, mod: func(in *Input, v string) { in.Action.Payee = v }, check: CheckValue, code: ReasonPayeeNotAllowed},
		{name: "new payee", base: payoutIn, mod: func(in *Input, v string) {
			in.Action.Payee, in.Mandate.AllowedPayees, in.PayeeSeenBefore = v, nil, false
			in.Mandate.Advisory = &countersignv1.AdvisorySettings{Enabled: true}
		}, check: func(in Input) Result { return CheckAdvisory(in, NewPayee{}) }, code: ReasonNewPayee},
		{name: "refund subject", base: refundIn, mod: func(in *Input, v string) { in.Action.Subject, in.Referent.Currency = v, "EUR" }, check: CheckValue, code: ReasonCurrencyMismatch},
		{name: "currency not granted", base: refundIn, mod: func(in *Input, v string) { in.Action.Currency = v }, check: CheckScope, code: ReasonCurrencyNotGranted},
		{name: "host", base: refundIn, mod: func(in *Input, v string) {
			in.Host, in.Mandate.Provenance = v, &countersignv1.Provenance{RailHost: "api.stripe.com"}
		}, check: CheckProvenance, code: ReasonHostNotPinned},
		{name: "api version", base: refundIn, mod: func(in *Input, v string) {
			in.APIVersion, in.Mandate.Provenance = v, &countersignv1.Provenance{ApiVersion: "2024-06-20"}
		}, check: CheckProvenance, code: ReasonAPIVersionMismatch},
		{name: "mcp tool", base: refundIn, mod: func(in *Input, v string) {
			in.MCP, in.MCPTool = true, v
			in.Mandate.Provenance = &countersignv1.Provenance{McpToolDescriptionHashes: map[string]string{"refund": "ab12"}}
		}, check: CheckProvenance, code: ReasonMCPToolNotPinned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason := func(v string) string {
				in := tc.base()
				tc.mod(&in, v)
				r := tc.check(in)
				if r.ReasonCode != tc.code {
					t.Fatalf("got %s %s (%s), want %s", r.Verdict, r.ReasonCode, r.Reason, tc.code)
				}
				return r.Reason
			}
			seenCodes[tc.code] = true
			plain, hostile := reason("plain"), reason(evil)
			if !strings.Contains(hostile, inert(evil)) {
				t.Errorf("reason %q does not name the value as %q", hostile, inert(evil))
			}
			for _, c := range markup {
				if strings.Count(hostile, string(c)) != strings.Count(plain, string(c)) {
					t.Errorf("reason carries the agent's %q: %q", c, hostile)
				}
			}
			if strings.Contains(plain, "metadata[") && !strings.Contains(plain, "metadata[plain]") {
				t.Errorf("reason %q does not name metadata[plain] as it is", plain)
			}
		})
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
