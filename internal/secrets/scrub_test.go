package secrets

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A PaymentIntent as Stripe answers GET /v1/payment_intents/{id}, and a
// refund list with each refund's PaymentIntent expanded.
const (
	piAnswer = `{"id":"pi_1","object":"payment_intent","amount":2500,"client_secret":"pi_1_secret_abc","currency":"usd",` +
		`"latest_charge":"ch_1","metadata":{"order":"42"},"status":"requires_confirmation"}`
	refundListAnswer = `{"object":"list","data":[{"id":"re_1","object":"refund","amount":100,` +
		`"payment_intent":{"id":"pi_1","object":"payment_intent","client_secret":"pi_1_secret_abc","status":"succeeded"}},` +
		`{"id":"re_2","object":"refund","amount":200,"payment_intent":{"id":"pi_2","CLIENT_SECRET":"pi_2_secret_def",` +
		`"client\u005fsecret":"pi_2_secret_ghi"}}],"has_more":false,"url":"/v1/refunds"}`
	// A PaymentIntent awaiting the customer's 3-D Secure step: its secret
	// again in next_action's URL (and in next_source_action's on older
	// API versions), beside the publishable key.
	piAwaitingAction = `{"id":"pi_3X","object":"payment_intent","client_secret":"pi_3X_secret_AAA","status":"requires_action",` +
		`"next_action":{"type":"redirect_to_url","redirect_to_url":{"return_url":"https://shop.example/done",` +
		`"url":"https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1&payment_intent=pi_3X&payment_intent_client_secret=pi_3X_secret_AAA&publishable_key=pk_live_BBB&source=payatt_1"}},` +
		`"next_source_action":{"authorize_with_url":{"url":"https://hooks.stripe.com/3d_secure_2/hosted?payment_intent_client_secret=pi_3X_secret_AAA"}}}`
)

// chargeAnswer is a Charge as Stripe answers GET /v1/charges/{id}.
const chargeAnswer = `{"id":"ch_1","object":"charge","amount":2500,` +
	`"billing_details":{"address":{"city":"Springfield","line1":"1 Main St","postal_code":"12345"},"email":"jenny@example.com","name":"Jenny Rosen","phone":"+15555550100"},` +
	`"customer":"cus_1","payment_method":"pm_1",` +
	`"payment_method_details":{"card":{"brand":"visa","country":"US","exp_month":8,"exp_year":2030,"fingerprint":"Xt5EWLLDS7FJjR1c","funding":"credit","last4":"4242","network":"visa"},"type":"card"},` +
	`"status":"succeeded"}`

func TestScrubJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{}`},
		{`{"client_secret":null}`, `{}`},
		// A value that names client_secret, or holds "_secret_" in a
		// word that is no secret, is kept (found by a review: a
		// documentation search's answer was emptied).
		{`{"a":{"client_secret":"x","b":[1,{"Client_Secret":"y"}]},"c":"client_secret"}`, `{"a":{"b":[1,{}]},"c":"client_secret"}`},
		{`{"description":"Pass the client_secret to confirmCardPayment; see has_secret_ or _secret_x.","q":"payment_intent_client_secret="}`,
			`{"description":"Pass the client_secret to confirmCardPayment; see has_secret_ or _secret_x.","q":"payment_intent_client_secret="}`},
		// A PaymentIntent awaiting the customer's action repeats its
		// secret in next_action's URL, beside the publishable key (found
		// by a review): the secret is replaced, however escaped, and the
		// rest of the value kept.
		{`{"next_action":{"redirect_to_url":{"url":"https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1&payment_intent=pi_3X&payment_intent_client_secret=pi_3X_secret_AAA&publishable_key=pk_live_BBB"}},"id":"pi_3X"}`,
			`{"next_action":{"redirect_to_url":{"url":"https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1&payment_intent=pi_3X&payment_intent_client_secret=[removed by Countersign]&publishable_key=pk_live_BBB"}},"id":"pi_3X"}`},
		{`{"u":"pi_1\u005fsecret\u005fabc","v":["seti_1_SECRET_x","src_client_secret_y","ok"]}`,
			`{"u":"[removed by Countersign]","v":["[removed by Countersign]","[removed by Countersign]","ok"]}`},
		// Every documented shape: a Checkout Session's, a CustomerSession's
		// and a payment attempt's, in running text, the text kept.
		{`"use cs_test_a1B2_secret_c3D4, cuss_secret_XyZ and payatt_9_secret_q!"`,
			`"use [removed by Countersign], [removed by Countersign] and [removed by Countersign]!"`},
		{`"<a href=\"/x?s=pi_1_secret_2\">"`, `"<a href=\"/x?s=[removed by Countersign]\">"`},
		{`{"client_ſecret":"long s"}`, `{}`},
		{`{"client_secret":1,"client_secret":2,"d":3}`, `{"d":3}`},
		{`"client_secret"`, `"client_secret"`},
		{`"pi_1"`, `"pi_1"`},
		{` [ 1 , {"x" : true , "client_secret" : "s" } ] `, `[1,{"x":true}]`},
		// A card and its holder's details go wherever they sit (found by
		// a review: a charge read carried them).
		{chargeAnswer, `{"id":"ch_1","object":"charge","amount":2500,"customer":"cus_1","payment_method":"pm_1","status":"succeeded"}`},
		{`{"id":"pi_1","payment_method":"pm_1","last_payment_error":{"code":"card_declined","payment_method":{"id":"pm_1","card":{"last4":"0002"}}}}`,
			`{"id":"pi_1","payment_method":"pm_1","last_payment_error":{"code":"card_declined"}}`},
		{`{"id":"pay_1","entity":"payment","method":"upi","vpa":"jane@okbank","CARD":{"last4":"1111"},"Billing_Details":null}`,
			`{"id":"pay_1","entity":"payment","method":"upi"}`},
		{`{"id":"re_1","destination_details":{"type":"card","card":{"reference":"123","type":"refund"}}}`, `{"id":"re_1","destination_details":{"type":"card"}}`},
		// A legacy charge's Card under source, a PaymentIntent's after a
		// failed source payment, shipping and receipt_email (found by a
		// review of this list); a source named by id is kept.
		// A customer's contact details are kept (a support agent finds
		// the payment by them).
		{`{"id":"ch_2","source":{"id":"card_1","object":"card","name":"J","last4":"4242","exp_year":2030},"receipt_email":"j@example.com",` +
			`"shipping":{"name":"J","address":{"line1":"1 Main St"}},"last_payment_error":{"source":{"object":"card"}},"status":"succeeded"}`,
			`{"id":"ch_2","receipt_email":"j@example.com","last_payment_error":{},"status":"succeeded"}`},
		{`{"id":"ch_3","source":"src_1"}`, `{"id":"ch_3","source":"src_1"}`},
		// A member whose name holds a client secret goes too.
		{`{"pi_1_secret_x":1,"y":2}`, `{"y":2}`},
		// JSON held in a string (an MCP tool's text item) loses the same
		// members, and is written back as a string.
		{`{"content":[{"type":"text","text":"{\"id\":\"ch_1\",\"billing_details\":{\"name\":\"Jenny Rosen\"},\"client_secret\":\"pi_1_secret_a\",\"amount\":5}"}]}`,
			`{"content":[{"type":"text","text":"{\"id\":\"ch_1\",\"amount\":5}"}]}`},
		{`{"text":"[{\"id\":\"x\"}]"}`, `{"text":"[{\"id\":\"x\"}]"}`},
		{`{"text":"{not json pi_1_secret_a"}`, `{"text":"{not json [removed by Countersign]"}`},
	} {
		got, _, err := ScrubJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("ScrubJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1}x`, `{"a":1}{"b":2}`, `nul`, "\x1f\x8b"} {
		if _, _, err := ScrubJSON([]byte(bad)); err == nil {
			t.Errorf("ScrubJSON(%q) accepted", bad)
		}
	}
}

// FuzzScrubJSON: whatever the rail answers, ScrubJSON never panics;
// what it returns is valid JSON that decodes to the input's value without
// any member a decoder would take for client_secret, and an input without
// one comes back byte for byte.
func FuzzScrubJSON(f *testing.F) {
	for _, s := range []string{piAnswer, refundListAnswer, piAwaitingAction, chargeAnswer, `{"t":"{\"card\":1,\"u\":\"[\\\"pi_1_secret_2\\\"]\"}"}`, `{"a":[{"client_secret":1}],"b":"\u0063"}`, `[]`, `1e9`, `{"x\"y":"\\"}`, "{\"client_\\u017fecret\":1}",
		`{"d":"see client_secret","u":"x&y=pi_1_secret_2<","w":"a_secret_b_secret_c_"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, n, err := ScrubJSON(in)
		if err != nil {
			if json.Valid(in) {
				t.Fatalf("refused valid JSON %q: %v", in, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%q became invalid JSON %q", in, out)
		}
		want := decode(t, in)
		if dropSecrets(&want) && n == 0 {
			t.Fatalf("%q: a decoder reads a secret, none was removed", in)
		}
		if n == 0 && !bytes.Equal(out, in) {
			t.Fatalf("%q changed to %q with nothing removed", in, out)
		}
		got := decode(t, out)
		if dropSecrets(&got) {
			t.Fatalf("%q keeps a secret in %q", in, out)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q scrubbed to %q: decodes to %#v, want %#v", in, out, got, want)
		}
	})
}

// decode decodes b, each string that is itself a JSON object or array
// decoded too (as a jsonText).
func decode(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return norm(v)
}

// jsonText is a string value holding a JSON object or array, decoded.
type jsonText struct{ V any }

func norm(v any) any {
	switch x := v.(type) {
	case string:
		if t := strings.TrimLeft(x, " \t\n\r"); t != "" && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(x)) {
			d := json.NewDecoder(strings.NewReader(x))
			d.UseNumber()
			var inner any
			if d.Decode(&inner) == nil {
				return jsonText{norm(inner)}
			}
		}
	case map[string]any:
		for k, e := range x {
			x[k] = norm(e)
		}
	case []any:
		for i := range x {
			x[i] = norm(x[i])
		}
	}
	return v
}

// secretToken is the oracle's own reading of a client secret's shape,
// written apart from clientSecretRE: a word of underscore-joined
// segments, one of them "secret" with a segment before and after it.
var secretToken = regexp.MustCompile(`(?i)\b[a-z0-9]+(?:_[a-z0-9]+)*_secret(?:_[a-z0-9]+)+`)

// dropSecrets removes the members the agent may not see from a decoded
// value (decode's) and replaces each secret inside a string, reporting
// whether it found any.
func dropSecrets(v *any) bool {
	found := false
	switch x := (*v).(type) {
	case string:
		if secretToken.MatchString(x) {
			*v = secretToken.ReplaceAllLiteralString(x, "[removed by Countersign]")
			found = true
		}
	case jsonText:
		found = dropSecrets(&x.V)
		*v = x
	case map[string]any:
		for k, e := range x {
			_, object := e.(map[string]any)
			if strings.EqualFold(k, Member) || slices.ContainsFunc(CardMembers, func(m string) bool { return strings.EqualFold(k, m) }) ||
				object && (strings.EqualFold(k, "payment_method") || strings.EqualFold(k, "source")) || secretToken.MatchString(k) {
				delete(x, k)
				found = true
				continue
			}
			if dropSecrets(&e) {
				found = true
			}
			x[k] = e
		}
	case []any:
		for i := range x {
			if dropSecrets(&x[i]) {
				found = true
			}
		}
	}
	return found
}

func TestRedactTokens(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"client_secret and _secret_ and has_secret_", "client_secret and _secret_ and has_secret_"},
		{"pi_1_secret_abc", Redacted},
		{"x=PI_1_SECRET_ABC&y", "x=" + Redacted + "&y"},
		{`"pi_1\u005Fsecret\u005fabc"`, `"` + Redacted + `"`},
		{"pi_1%5fsecret%5Fabc;cuss_secret_Q", Redacted + ";" + Redacted},
		{"\xffcs_test_a_secret_b\xfe", "\xff" + Redacted + "\xfe"},
	} {
		got, n := RedactTokens([]byte(tc.in))
		if string(got) != tc.want || (n == 0) != (tc.in == tc.want) {
			t.Errorf("RedactTokens(%q) = %q, %d; want %q", tc.in, got, n, tc.want)
		}
	}
}

// FuzzRedactTokens: whatever bytes an answer holds, what
// RedactTokens returns holds no secret token (nor one a JSON or URL
// decoding of an underscore would make), redacting again finds nothing,
// and an input without one comes back byte for byte.
func FuzzRedactTokens(f *testing.F) {
	for _, s := range []string{"Session terminated\n", "pi_1_secret_abc", `a\u005fsecret\u005fb_secret_c`, "x_secret_y_secret_z%5f", "\xffpi_1_secret_2\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, n := RedactTokens(in)
		if n == 0 && !bytes.Equal(out, in) {
			t.Fatalf("%q changed to %q with nothing removed", in, out)
		}
		if n > 0 && bytes.Equal(out, in) {
			t.Fatalf("%q: %d removed, nothing changed", in, n)
		}
		decoded := strings.NewReplacer(`\u005f`, "_", `\u005F`, "_", "%5f", "_", "%5F", "_").Replace(string(out))
		if tok := secretToken.FindString(decoded); tok != "" {
			t.Fatalf("%q Redacted to %q, which still holds %q", in, out, tok)
		}
		if again, m := RedactTokens(out); m != 0 || !bytes.Equal(again, out) {
			t.Fatalf("%q Redacted to %q, which redacts again to %q (%d)", in, out, again, m)
		}
	})
}

// TestScrubAnswer: an answer the agent is to read whatever it holds (a
// money call's outcome, a replayed stored answer) is scrubbed by its media
// type, and where its grammar cannot be read, its raw bytes' secret
// tokens are redacted: it is never refused, never passed with a secret.
func TestScrubAnswer(t *testing.T) {
	for _, tc := range []struct{ name, ct, in, want string }{
		{"JSON", "application/json; charset=utf-8", `{"client_secret":"pi_1_secret_a","id":"pi_1"}`, `{"id":"pi_1"}`},
		{"untyped JSON", "", `{"client_secret":"pi_1_secret_a","id":"pi_1"}`, `{"id":"pi_1"}`},
		{"JSON behind a byte order mark", "application/json", "\ufeff" + `{"client_secret":"pi_1_secret_a"}`, "\ufeff" + `{"client_secret":"` + Redacted + `"}`},
		{"an event stream", "text/event-stream", "data: {\"client_secret\":\"pi_1_secret_a\",\"id\":1}\n\n", "data: {\"id\":1}\n\n"},
		{"an event stream with an event that is not JSON", "text/event-stream", "data: ok\n\ndata: {\"s\":\"pi_1_secret_a\"}\n\n",
			"data: ok\n\ndata: {\"s\":\"" + Redacted + "\"}\n\n"},
		{"text", "text/plain", "see pi_1_secret_a", "see " + Redacted},
		{"nothing to remove", "text/plain", "Session terminated", "Session terminated"},
		{"empty", "application/json", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := ScrubAnswer(tc.ct, []byte(tc.in))
			if string(got) != tc.want || (n == 0) != (tc.in == tc.want) {
				t.Fatalf("ScrubAnswer(%q, %q) = %q, %d; want %q", tc.ct, tc.in, got, n, tc.want)
			}
		})
	}
}
