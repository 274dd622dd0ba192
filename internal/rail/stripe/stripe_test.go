package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/sik"
)

func ptr(n int64) *int64 { return &n }

var formHeaders = map[string]string{"content-type": "application/x-www-form-urlencoded"}

func post(path, body string) rail.Request {
	return rail.Request{Method: http.MethodPost, Host: "api.stripe.com", Path: path, Headers: formHeaders, Body: []byte(body)}
}

func postH(path, body string, headers map[string]string) rail.Request {
	r := post(path, body)
	r.Headers = map[string]string{}
	for k, v := range formHeaders {
		r.Headers[k] = v
	}
	for k, v := range headers {
		r.Headers[k] = v
	}
	return r
}

func getReq(path string) rail.Request {
	return rail.Request{Method: http.MethodGet, Host: "api.stripe.com", Path: path}
}

// parseCases are one or more requests per endpoint, with the action each
// means.
var parseCases = []railtest.ActionCase{
	{
		Name: "refund_payment_intent_partial_with_distinct",
		Req: postH("/v1/refunds", "payment_intent=pi_3Mtw&amount=1500&reason=requested_by_customer&metadata[order]=42",
			map[string]string{"x-countersign-distinct": "second refund approved by owner"}),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pi_3Mtw", AmountMinor: ptr(1500),
			Distinct: "second refund approved by owner"},
	},
	{
		Name: "refund_charge_full",
		Req:  post("/v1/refunds", "charge=ch_3Mtw"),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "ch_3Mtw"},
	},
	{
		Name: "refund_with_currency_and_flags",
		Req:  post("/v1/refunds", "payment_intent=pi_1&amount=0&currency=usd&refund_application_fee=false&reverse_transfer=true&expand[]=balance_transaction"),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: ptr(0), Currency: "USD",
			Extra: map[string]string{"reverse_transfer": "true"}},
	},
	{
		Name: "refund_explicit_defaults_and_labels",
		Req: postH("/v1/refunds", "charge=ch_3Mtw&reason=duplicate&refund_application_fee=false&reverse_transfer=false&metadata%5Border%5D=42&expand%5B%5D=failure_balance_transaction&expand[]=balance_transaction",
			map[string]string{"stripe-version": "2025-08-27.basil", "idempotency-key": "sdk-random-uuid", "user-agent": "Stripe/v1 GoBindings/79.0.0", "x-stripe-client-user-agent": "{}"}),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "ch_3Mtw"},
	},
	{
		Name: "refund_percent_encoded_keys",
		Req:  post("/v1/refunds", "payment%5Fintent=pi_1&amount=250&metadata%5Bcountersign_sik%5D=caller-forged"),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: ptr(250)},
	},
	{
		Name: "payout_instant",
		Req:  post("/v1/payouts", "amount=5000&currency=usd&destination=ba_1Nx&method=instant&metadata[run]=7"),
		Want: rail.Action{Kind: sik.KindPayout, Subject: "ba_1Nx", AmountMinor: ptr(5000), Currency: "USD", Payee: "ba_1Nx",
			Extra: map[string]string{"method": "instant"}},
	},
	{
		Name: "payout_default_method_is_standard",
		Req:  postH("/v1/payouts", "amount=5000&currency=EUR&destination=card_1&description=weekly&statement_descriptor=ACME+PAYOUT", map[string]string{"content-type": "application/x-www-form-urlencoded; charset=UTF-8"}),
		Want: rail.Action{Kind: sik.KindPayout, Subject: "card_1", AmountMinor: ptr(5000), Currency: "EUR", Payee: "card_1",
			Extra: map[string]string{"method": "standard"}},
	},
	{
		Name: "transfer_with_source_transaction",
		Req:  post("/v1/transfers", "amount=2500&currency=eur&destination=acct_1Q&source_transaction=ch_9&transfer_group=ORDER_9"),
		Want: rail.Action{Kind: sik.KindTransfer, Subject: "acct_1Q", AmountMinor: ptr(2500), Currency: "EUR", Payee: "acct_1Q",
			Extra: map[string]string{"source_transaction": "ch_9"}},
	},
	{
		Name: "transfer_minimal",
		Req:  post("/v1/transfers", "amount=1&currency=gbp&destination=acct_2"),
		Want: rail.Action{Kind: sik.KindTransfer, Subject: "acct_2", AmountMinor: ptr(1), Currency: "GBP", Payee: "acct_2"},
	},
}

var readCases = []railtest.RequestCase{
	{Name: "payment_intent", Req: getReq("/v1/payment_intents/pi_1")},
	{Name: "charge", Req: getReq("/v1/charges/ch_1")},
	{Name: "refunds_list", Req: getReq("/v1/refunds?payment_intent=pi_1&limit=100")},
	{Name: "refund", Req: getReq("/v1/refunds/re_1")},
	{Name: "payouts_list", Req: getReq("/v1/payouts")},
	{Name: "payout", Req: getReq("/v1/payouts/po_1")},
	{Name: "transfers_list", Req: getReq("/v1/transfers?limit=3")},
	// What Find and an SDK's auto-paging send on a list (query.go).
	{Name: "refunds_list_paging", Req: getReq("/v1/refunds?charge=ch_1&limit=100&starting_after=re_9")},
	{Name: "refunds_list_since", Req: getReq("/v1/refunds?created%5Bgte%5D=1700000000&created[lt]=1800000000&limit=100")},
	{Name: "refunds_list_exact_time", Req: getReq("/v1/refunds?created=1700000000")},
	{Name: "refunds_list_empty_query", Req: getReq("/v1/refunds?")},
	{Name: "payouts_list_filtered", Req: getReq("/v1/payouts?created[gte]=1700000000&arrival_date[lte]=1800000000&status=paid&destination=ba_1&ending_before=po_2&limit=1")},
	{Name: "transfers_list_filtered", Req: getReq("/v1/transfers?destination=acct_1&created[gte]=1700000000&transfer_group=ORDER+9&limit=100")},
	{Name: "transfer", Req: getReq("/v1/transfers/tr_1")},
	{Name: "balance", Req: getReq("/v1/balance")},
}

var malformedCases = []railtest.MalformedCase{
	{Name: "refund_without_subject", Req: post("/v1/refunds", "amount=100"), Field: "payment_intent"},
	{Name: "refund_with_both_subjects", Req: post("/v1/refunds", "payment_intent=pi_1&charge=ch_1"), Field: "charge"},
	{Name: "refund_subject_not_an_id", Req: post("/v1/refunds", "payment_intent=pi_1+"), Field: "payment_intent"},
	{Name: "refund_subject_empty", Req: post("/v1/refunds", "charge="), Field: "charge"},
	{Name: "refund_subject_repeated", Req: post("/v1/refunds", "payment_intent=pi_1&payment_intent=pi_2"), Field: "payment_intent"},
	{Name: "payout_without_amount", Req: post("/v1/payouts", "currency=usd&destination=ba_1"), Field: "amount"},
	{Name: "payout_without_currency", Req: post("/v1/payouts", "amount=1&destination=ba_1"), Field: "currency"},
	{Name: "payout_without_destination", Req: post("/v1/payouts", "amount=1&currency=usd"), Field: "destination"},
	{Name: "payout_method_repeated", Req: post("/v1/payouts", "amount=1&currency=usd&destination=ba_1&method=standard&method=instant"), Field: "method"},
	{Name: "transfer_currency_too_long", Req: post("/v1/transfers", "amount=1&currency=usdd&destination=acct_1"), Field: "currency"},
	{Name: "transfer_currency_digit", Req: post("/v1/transfers", "amount=1&currency=us1&destination=acct_1"), Field: "currency"},
	{Name: "transfer_currency_repeated", Req: post("/v1/transfers", "amount=1&currency=usd&currency=eur&destination=acct_1"), Field: "currency"},
	{Name: "transfer_destination_hash", Req: post("/v1/transfers", "amount=1&currency=usd&destination[account]=acct_1"), Field: "destination"},
	{Name: "amount_as_array", Req: post("/v1/refunds", "payment_intent=pi_1&amount[]=5"), Field: "amount"},
	{Name: "amount_leading_zero", Req: post("/v1/refunds", "payment_intent=pi_1&amount=010"), Field: "amount"},
	{Name: "amount_plus_sign", Req: post("/v1/refunds", "payment_intent=pi_1&amount=%2B5"), Field: "amount"},
	{Name: "amount_space", Req: post("/v1/refunds", "payment_intent=pi_1&amount=+5"), Field: "amount"},
	{Name: "amount_empty", Req: post("/v1/refunds", "payment_intent=pi_1&amount="), Field: "amount"},
	{Name: "amount_hex", Req: post("/v1/refunds", "payment_intent=pi_1&amount=0x10"), Field: "amount"},
	{Name: "query_on_post", Req: post("/v1/refunds?amount=999999", "payment_intent=pi_1&amount=1"), Field: "query"},
	// A read's query: strict, and only what its path admits (query.go).
	{Name: "read_expand_payment_intent", Req: getReq("/v1/payment_intents/pi_1?expand[]=latest_charge"), Field: "expand[]"},
	{Name: "read_expand_charge_payment_intent", Req: getReq("/v1/charges/ch_1?expand[]=payment_intent"), Field: "expand[]"},
	{Name: "read_expand_list_payment_intent", Req: getReq("/v1/refunds?expand[]=data.payment_intent&limit=100"), Field: "expand[]"},
	{Name: "read_expand_refund_payment_intent", Req: getReq("/v1/refunds/re_1?expand[]=payment_intent"), Field: "expand[]"},
	{Name: "read_expand_escaped", Req: getReq("/v1/refunds?expand%5B%5D=data.payment_intent"), Field: "expand[]"},
	{Name: "read_expand_indexed", Req: getReq("/v1/refunds?expand[0]=data.payment_intent"), Field: "expand[0]"},
	{Name: "read_expand_bare", Req: getReq("/v1/refunds?expand=data.payment_intent"), Field: "expand"},
	{Name: "read_unknown_member", Req: getReq("/v1/refunds?limit=10&future_filter=1"), Field: "future_filter"},
	{Name: "read_member_of_another_list", Req: getReq("/v1/refunds?destination=acct_1"), Field: "destination"},
	{Name: "read_object_takes_no_query", Req: getReq("/v1/refunds/re_1?limit=1"), Field: "limit"},
	{Name: "read_balance_takes_no_query", Req: getReq("/v1/balance?currency=usd"), Field: "currency"},
	{Name: "read_member_repeated", Req: getReq("/v1/refunds?limit=10&limit=100"), Field: "limit"},
	{Name: "read_member_repeated_escaped", Req: getReq("/v1/refunds?charge=ch_1&%63harge=ch_2"), Field: "charge"},
	{Name: "read_time_exact_and_range", Req: getReq("/v1/refunds?created=1700000000&created[gte]=1"), Field: "created"},
	{Name: "read_time_range_and_exact", Req: getReq("/v1/refunds?created[gte]=1&created=1700000000"), Field: "created"},
	{Name: "read_time_other_op", Req: getReq("/v1/refunds?created[eq]=1"), Field: "created[eq]"},
	{Name: "read_time_not_digits", Req: getReq("/v1/refunds?created[gte]=-1"), Field: "created[gte]"},
	{Name: "read_limit_too_large", Req: getReq("/v1/refunds?limit=101"), Field: "limit"},
	{Name: "read_limit_zero", Req: getReq("/v1/refunds?limit=0"), Field: "limit"},
	{Name: "read_cursor_not_an_id", Req: getReq("/v1/refunds?starting_after=re_1%26expand"), Field: "starting_after"},
	{Name: "read_member_empty", Req: getReq("/v1/refunds?payment_intent="), Field: "payment_intent"},
	{Name: "read_bad_escape", Req: getReq("/v1/refunds?limit=%zz"), Field: "query"},
	{Name: "read_semicolon", Req: getReq("/v1/refunds?limit=1;expand[]=data.payment_intent"), Field: "query"},
	{Name: "read_piece_without_value", Req: getReq("/v1/refunds?limit"), Field: "query"},
	{Name: "read_leading_question_mark", Req: getReq("/v1/refunds??limit=1"), Field: "query"},
	{Name: "read_not_utf8", Req: getReq("/v1/refunds?transfer_group=%ff"), Field: "query"},
	{Name: "read_payout_status_unknown", Req: getReq("/v1/payouts?status=everything"), Field: "status"},
	// A refund's answer may not embed its PaymentIntent either.
	{Name: "refund_expand_payment_intent", Req: post("/v1/refunds", "payment_intent=pi_1&expand[]=payment_intent"), Field: "expand"},
	{Name: "json_body", Req: postH("/v1/refunds", `{"payment_intent":"pi_1"}`, map[string]string{"content-type": "application/json"}), Field: "content-type"},
	{Name: "untyped_body", Req: rail.Request{Method: http.MethodPost, Path: "/v1/transfers", Body: []byte("amount=1&currency=gbp&destination=acct_2")}, Field: "content-type"},
	{Name: "multipart_body", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"content-type": "multipart/form-data; boundary=x"}), Field: "content-type"},
	{Name: "invalid_utf8", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[x]=\xff"), Field: "body"},
	{Name: "bad_escape", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[x]=%zz"), Field: "body"},
	{Name: "semicolon_separator", Req: post("/v1/refunds", "payment_intent=pi_1;amount=5"), Field: "body"},
	{Name: "metadata_full", Req: post("/v1/refunds", "payment_intent=pi_1"+manyMetadata(50)), Field: "metadata"},
	{Name: "unknown_member", Req: post("/v1/refunds", "payment_intent=pi_1&future_field=1"), Field: "future_field"},
	{Name: "member_other_case", Req: post("/v1/refunds", "payment_intent=pi_1&Amount=5"), Field: "Amount"},
	{Name: "member_trailing_space", Req: post("/v1/refunds", "payment_intent=pi_1&amount+=5"), Field: "amount "},
	{Name: "member_leading_bracket", Req: post("/v1/refunds", "payment_intent=pi_1&[amount]=5"), Field: "[amount]"},
	{Name: "member_trailing_bracket", Req: post("/v1/refunds", "payment_intent=pi_1&amount]=5"), Field: "amount]"},
	{Name: "amount_hash", Req: post("/v1/refunds", "payment_intent=pi_1&amount[x]=5"), Field: "amount"},
	{Name: "amount_encoded_brackets", Req: post("/v1/refunds", "payment_intent=pi_1&amount%5B%5D=5"), Field: "amount"},
	{Name: "metadata_nested", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[a][b]=1"), Field: "metadata"},
	{Name: "metadata_bare", Req: post("/v1/refunds", "payment_intent=pi_1&metadata="), Field: "metadata"},
	{Name: "metadata_empty_key", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[]=1"), Field: "metadata"},
	{Name: "metadata_key_too_long", Req: post("/v1/refunds", "payment_intent=pi_1&metadata["+strings.Repeat("k", 41)+"]=1"), Field: "metadata"},
	{Name: "metadata_value_too_long", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[k]="+strings.Repeat("v", 501)), Field: "metadata"},
	{Name: "metadata_repeated", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[k]=1&metadata%5Bk%5D=2"), Field: "metadata"},
	{Name: "stamp_repeated", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[countersign_sik]=a&metadata[countersign_sik]=b"), Field: "metadata"},
	{Name: "expand_unknown_field", Req: post("/v1/refunds", "payment_intent=pi_1&expand[]=charge.customer"), Field: "expand"},
	// Expansions that carry a card's or its holder's details, which no
	// scrubber removes where ext_proc is out of the path (found by a review).
	{Name: "expand_charge_on_refund", Req: post("/v1/refunds", "payment_intent=pi_1&expand[]=charge"), Field: "expand"},
	{Name: "expand_customer_on_refund", Req: post("/v1/refunds", "payment_intent=pi_1&expand[]=customer"), Field: "expand"},
	{Name: "expand_payment_method_on_refund", Req: post("/v1/refunds", "payment_intent=pi_1&expand[]=payment_method"), Field: "expand"},
	{Name: "expand_destination_on_payout", Req: post("/v1/payouts", "amount=100&currency=usd&destination=ba_1&expand[]=destination"), Field: "expand"},
	{Name: "expand_destination_on_transfer", Req: post("/v1/transfers", "amount=100&currency=usd&destination=acct_1&expand[]=destination"), Field: "expand"},
	{Name: "expand_source_transaction_on_transfer", Req: post("/v1/transfers", "amount=100&currency=usd&destination=acct_1&expand[]=source_transaction"), Field: "expand"},
	{Name: "expand_indexed", Req: post("/v1/refunds", "payment_intent=pi_1&expand[0]=charge"), Field: "expand"},
	{Name: "reason_not_in_enum", Req: post("/v1/refunds", "payment_intent=pi_1&reason=because"), Field: "reason"},
	{Name: "reason_other_case", Req: post("/v1/refunds", "payment_intent=pi_1&reason=Duplicate"), Field: "reason"},
	{Name: "reason_empty", Req: post("/v1/refunds", "payment_intent=pi_1&reason="), Field: "reason"},
	{Name: "flag_not_boolean", Req: post("/v1/refunds", "payment_intent=pi_1&reverse_transfer=1"), Field: "reverse_transfer"},
	{Name: "flag_other_case", Req: post("/v1/refunds", "payment_intent=pi_1&refund_application_fee=True"), Field: "refund_application_fee"},
	{Name: "refund_customer_balance", Req: post("/v1/refunds", "payment_intent=pi_1&origin=customer_balance"), Field: "origin"},
	{Name: "refund_instructions_email", Req: post("/v1/refunds", "payment_intent=pi_1&instructions_email=x%40example.com"), Field: "instructions_email"},
	{Name: "refund_customer", Req: post("/v1/refunds", "payment_intent=pi_1&customer=cus_1"), Field: "customer"},
	{Name: "method_override_param", Req: post("/v1/refunds", "payment_intent=pi_1&_method=DELETE"), Field: "_method"},
	{Name: "payout_source_type", Req: post("/v1/payouts", "amount=1&currency=usd&destination=ba_1&source_type=card"), Field: "source_type"},
	{Name: "payout_method_unknown", Req: post("/v1/payouts", "amount=1&currency=usd&destination=ba_1&method=fast"), Field: "method"},
	{Name: "payout_descriptor_too_long", Req: post("/v1/payouts", "amount=1&currency=usd&destination=ba_1&statement_descriptor="+strings.Repeat("x", 23)), Field: "statement_descriptor"},
	{Name: "payout_v2_method", Req: post("/v1/payouts", "amount=1&currency=usd&destination=ba_1&payout_method=fa_1"), Field: "payout_method"},
	{Name: "transfer_source_type", Req: post("/v1/transfers", "amount=1&currency=usd&destination=acct_1&source_type=bank_account"), Field: "source_type"},
	{Name: "transfer_source_transaction_not_id", Req: post("/v1/transfers", "amount=1&currency=usd&destination=acct_1&source_transaction=ch+1"), Field: "source_transaction"},
	{Name: "piece_without_equals", Req: post("/v1/refunds", "payment_intent=pi_1&amount"), Field: "body"},
	{Name: "empty_piece", Req: post("/v1/refunds", "payment_intent=pi_1&&amount=5"), Field: "body"},
	{Name: "empty_name", Req: post("/v1/refunds", "payment_intent=pi_1&=5"), Field: "body"},
	{Name: "decoded_not_utf8", Req: post("/v1/refunds", "payment_intent=pi_1&metadata[x]=%FF"), Field: "body"},
	{Name: "json_as_form", Req: post("/v1/refunds", `{"payment_intent":"pi_1","amount":5}`), Field: "body"},
	{Name: "charset_latin1", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"content-type": "application/x-www-form-urlencoded; charset=iso-8859-1"}), Field: "content-type"},
	{Name: "two_content_types", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"content-type": "application/x-www-form-urlencoded,application/json"}), Field: "content-type"},
	{Name: "gzip_body", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"content-encoding": "gzip"}), Field: "content-encoding"},
	{Name: "api_version_not_a_version", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"stripe-version": "latest"}), Field: "stripe-version"},
	{Name: "api_version_twice", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"stripe-version": APIVersion + "," + APIVersion}), Field: "stripe-version"},
	{Name: "api_version_with_beta", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"stripe-version": "2025-08-27.basil; feature_beta=v1"}), Field: "stripe-version"},
	{Name: "read_api_version_garbage", Req: rail.Request{Method: http.MethodGet, Path: "/v1/refunds/re_1", Headers: map[string]string{"stripe-version": "2025-03-31.Basil"}}, Field: "stripe-version"},
	{Name: "read_with_body", Req: rail.Request{Method: http.MethodGet, Path: "/v1/refunds/re_1", Body: []byte("amount=1")}, Field: "body"},
	{Name: "distinct_not_utf8", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"x-countersign-distinct": "\xff"}), Field: "x-countersign-distinct"},
	{Name: "refund_application_fee_true", Req: post("/v1/refunds", "payment_intent=pi_1&refund_application_fee=true"), Field: "refund_application_fee"},
	{Name: "distinct_too_long", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"x-countersign-distinct": strings.Repeat("é", 501)}), Field: "x-countersign-distinct"},
}

func manyMetadata(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "&metadata[k%d]=v", i)
	}
	return b.String()
}

var malformedAmounts = map[string]rail.Request{
	"fraction":    post("/v1/refunds", "payment_intent=pi_1&amount=10.5"),
	"exponent":    post("/v1/payouts", "amount=1e3&currency=usd&destination=ba_1"),
	"negative":    post("/v1/transfers", "amount=-1&currency=usd&destination=acct_1"),
	"non_numeric": post("/v1/refunds", "payment_intent=pi_1&amount=abc"),
	"duplicate":   post("/v1/refunds", "payment_intent=pi_1&amount=1&amount=100000"),
	"overflow":    post("/v1/refunds", "payment_intent=pi_1&amount=9007199254740992"),
}

var unrecognisedCases = []railtest.RequestCase{
	{Name: "update_refund", Req: post("/v1/refunds/re_1", "metadata[x]=1")},
	{Name: "cancel_payout", Req: post("/v1/payouts/po_1/cancel", "")},
	{Name: "create_payment_intent", Req: post("/v1/payment_intents", "amount=100&currency=usd")},
	{Name: "create_charge", Req: post("/v1/charges", "amount=100&currency=usd")},
	{Name: "reverse_transfer", Req: post("/v1/transfers/tr_1/reversals", "amount=100")},
	{Name: "list_customers", Req: getReq("/v1/customers")},
	{Name: "payment_intent_subresource", Req: getReq("/v1/payment_intents/pi_1/extra")},
	{Name: "v2_api", Req: post("/v2/core/events", "{}")},
	{Name: "encoded_slash", Req: post("/v1/refunds%2F", "payment_intent=pi_1")},
	{Name: "double_slash", Req: post("//v1/refunds", "payment_intent=pi_1")},
	{Name: "head_refunds", Req: rail.Request{Method: http.MethodHead, Path: "/v1/refunds"}},
	{Name: "connect_on_behalf", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"stripe-account": "acct_9"})},
	{Name: "connect_read", Req: rail.Request{Method: http.MethodGet, Path: "/v1/payment_intents/pi_1", Headers: map[string]string{"stripe-account": "acct_9"}}},
	{Name: "stripe_context", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"stripe-context": "ctx_1"})},
	{Name: "stripe_context_read", Req: rail.Request{Method: http.MethodGet, Path: "/v1/balance", Headers: map[string]string{"stripe-context": "ctx_1"}}},
	{Name: "unknown_stripe_header", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"stripe-something-new": "1"})},
	{Name: "unknown_countersign_header", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"x-countersign-verdict": "ALLOW"})},
	{Name: "method_override", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"x-http-method-override": "GET"})},
	{Name: "method_override_read", Req: rail.Request{Method: http.MethodGet, Path: "/v1/refunds", Headers: map[string]string{"x-http-method-override": "POST"}}},
	{Name: "url_rewrite", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"x-original-url": "/v1/payouts"})},
	{Name: "url_rewrite_read", Req: rail.Request{Method: http.MethodGet, Path: "/v1/balance", Headers: map[string]string{"x-rewrite-url": "/v1/payouts"}}},
	{Name: "forwarded_prefix", Req: postH("/v1/refunds", "payment_intent=pi_1", map[string]string{"x-forwarded-prefix": "/v1/payouts"})},
}

func headerRule(kind sik.Kind, name, value string) error {
	if name != "Idempotency-Key" {
		return fmt.Errorf("header %q, want Idempotency-Key for %s", name, kind)
	}
	if value == "" || len(value) > 255 {
		return fmt.Errorf("Idempotency-Key %q is not 1-255 characters", value)
	}
	return nil
}

func withBodyStamp(req rail.Request, value string) (rail.Request, error) {
	v, err := url.ParseQuery(string(req.Body))
	if err != nil {
		return req, err
	}
	v.Set(sik.StripeBodyField, value)
	req.Body = []byte(v.Encode())
	req.Headers["content-type"] = "application/x-www-form-urlencoded"
	return req, nil
}

const stampA = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

func refundJSON(id, pi, ch string, amount int64, currency, stamp string) string {
	md := `{}`
	if stamp != "" {
		md = fmt.Sprintf(`{"countersign_sik":%q,"order":"42"}`, stamp)
	}
	piJSON := "null"
	if pi != "" {
		piJSON = strconv.Quote(pi)
	}
	return fmt.Sprintf(`{"id":%q,"object":"refund","amount":%d,"balance_transaction":"txn_1","charge":%q,"created":1760000000,"currency":%q,"metadata":%s,"payment_intent":%s,"reason":null,"status":"succeeded"}`,
		id, amount, ch, currency, md, piJSON)
}

var (
	refundPI = rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: ptr(1500)}
	refundCh = rail.Action{Kind: sik.KindRefund, Subject: "ch_1"}
	payout   = rail.Action{Kind: sik.KindPayout, Subject: "ba_1", AmountMinor: ptr(5000), Currency: "USD", Payee: "ba_1", Extra: map[string]string{"method": "standard"}}
	transfer = rail.Action{Kind: sik.KindTransfer, Subject: "acct_1", AmountMinor: ptr(2500), Currency: "EUR", Payee: "acct_1"}
)

func resp(status int, body string) rail.Response {
	return rail.Response{Status: status, Body: []byte(body)}
}

func stripeErr(typ, code, msg string) string {
	return fmt.Sprintf(`{"error":{"type":%q,"code":%q,"message":%q}}`, typ, code, msg)
}

// classifyCases: one or more per row of DESIGN.md §4, named by the row.
var classifyCases = []railtest.ClassifyCase{
	// Row 1: 2xx with the created entity → Applied.
	{Name: "applied/refund_by_payment_intent", Action: refundPI, Resp: resp(200, refundJSON("re_1", "pi_1", "ch_1", 1500, "usd", stampA)),
		Want: rail.Applied, WantEntityID: "re_1", WantStamp: stampA},
	{Name: "applied/full_refund_by_charge", Action: refundCh, Resp: resp(200, refundJSON("re_2", "", "ch_1", 9900, "usd", "")),
		Want: rail.Applied, WantEntityID: "re_2"},
	{Name: "applied/payout_with_expanded_fee", Action: payout,
		Resp: resp(200, `{"id":"po_1","object":"payout","amount":5000,"currency":"usd","destination":"ba_1","method":"standard","status":"pending","created":1760000000,"metadata":{"countersign_sik":"`+stampA+`"},"balance_transaction":{"id":"txn_1","object":"balance_transaction","fee":150}}`),
		Want: rail.Applied, WantEntityID: "po_1", WantFeeMinor: 150, WantStamp: stampA},
	{Name: "applied/payout_fee_not_expanded", Action: payout,
		Resp: resp(200, `{"id":"po_2","object":"payout","amount":5000,"currency":"usd","destination":{"id":"ba_1","object":"bank_account"},"balance_transaction":"txn_2","status":"pending","metadata":{}}`),
		Want: rail.Applied, WantEntityID: "po_2"},
	{Name: "applied/transfer", Action: transfer,
		Resp: resp(200, `{"id":"tr_1","object":"transfer","amount":2500,"currency":"eur","destination":"acct_1","metadata":{"countersign_sik":"`+stampA+`"}}`),
		Want: rail.Applied, WantEntityID: "tr_1", WantStamp: stampA},
	{Name: "applied/created_201", Action: transfer, Resp: resp(201, `{"id":"tr_2","object":"transfer","amount":2500,"currency":"EUR","destination":"acct_1"}`),
		Want: rail.Applied, WantEntityID: "tr_2"},
	// A 2xx that is not this action's entity is never guessed applied.
	{Name: "applied?/replayed_other_payment", Action: refundPI, Resp: resp(200, refundJSON("re_9", "pi_OTHER", "ch_OTHER", 1500, "usd", "")), Want: rail.Ambiguous},
	{Name: "applied?/other_amount", Action: refundPI, Resp: resp(200, refundJSON("re_9", "pi_1", "ch_1", 1499, "usd", "")), Want: rail.Ambiguous},
	{Name: "applied?/other_currency", Action: transfer, Resp: resp(200, `{"id":"tr_3","object":"transfer","amount":2500,"currency":"usd","destination":"acct_1"}`), Want: rail.Ambiguous},
	{Name: "applied?/other_destination", Action: payout, Resp: resp(200, `{"id":"po_3","object":"payout","amount":5000,"currency":"usd","destination":"ba_OTHER"}`), Want: rail.Ambiguous},
	{Name: "applied?/wrong_object", Action: refundPI, Resp: resp(200, `{"id":"pi_1","object":"payment_intent","amount":1500,"currency":"usd"}`), Want: rail.Ambiguous},
	{Name: "applied?/no_amount", Action: refundCh, Resp: resp(200, `{"id":"re_1","object":"refund","charge":"ch_1","currency":"usd"}`), Want: rail.Ambiguous},
	{Name: "applied?/error_body_with_200", Action: refundPI, Resp: resp(200, stripeErr("api_error", "", "boom")), Want: rail.Ambiguous},
	// Row 2: 409 / idempotency_key_in_use → InProgress.
	{Name: "in_progress/409_idempotency_key_in_use", Action: refundPI,
		Resp: resp(409, stripeErr("invalid_request_error", "idempotency_key_in_use", "There is currently another in-progress request using this Stripe API key with the same idempotency key.")), Want: rail.InProgress},
	{Name: "in_progress/409_bare", Action: payout, Resp: resp(409, ""), Want: rail.InProgress},
	{Name: "in_progress/code_on_400", Action: payout, Resp: resp(400, stripeErr("invalid_request_error", "idempotency_key_in_use", "in use")), Want: rail.InProgress},
	// Row 3: idempotency_error → FingerprintMismatch.
	{Name: "fingerprint_mismatch/idempotency_error", Action: refundPI,
		Resp: resp(400, stripeErr("idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")), Want: rail.FingerprintMismatch},
	// Row 4: 400/402/404 → Rejected.
	{Name: "rejected/400_amount_too_large", Action: refundPI, Resp: resp(400, stripeErr("invalid_request_error", "amount_too_large", "Refund amount is greater than unrefunded amount on charge")), Want: rail.Rejected},
	{Name: "rejected/400_charge_already_refunded", Action: refundCh, Resp: resp(400, stripeErr("invalid_request_error", "charge_already_refunded", "Charge ch_1 has already been refunded.")), Want: rail.Rejected},
	{Name: "rejected/402_insufficient_funds", Action: payout, Resp: resp(402, stripeErr("invalid_request_error", "balance_insufficient", "You have insufficient funds in your Stripe account.")), Want: rail.Rejected},
	{Name: "rejected/404_resource_missing", Action: refundPI, Resp: resp(404, stripeErr("invalid_request_error", "resource_missing", "No such payment_intent: 'pi_1'")), Want: rail.Rejected},
	{Name: "rejected/403_permission", Action: transfer, Resp: resp(403, stripeErr("invalid_request_error", "", "The provided key does not have access")), Want: rail.Rejected},
	// Row 5: 429 and 401 → Rejected (the idempotency layer never ran).
	{Name: "rejected/429_rate_limit", Action: refundPI, Resp: resp(429, stripeErr("invalid_request_error", "rate_limit", "Too many requests hit the API too quickly.")), Want: rail.Rejected},
	{Name: "rejected/401_no_key", Action: payout, Resp: resp(401, stripeErr("invalid_request_error", "", "You did not provide an API key.")), Want: rail.Rejected},
	// Row 6: 5xx, timeout, reset, lost → Ambiguous.
	{Name: "ambiguous/500_api_error", Action: refundPI, Resp: resp(500, stripeErr("api_error", "", "An unknown error occurred")), Want: rail.Ambiguous},
	{Name: "ambiguous/500_idempotency_error_type", Action: refundPI, Resp: resp(500, stripeErr("idempotency_error", "", "odd")), Want: rail.Ambiguous},
	{Name: "ambiguous/503", Action: payout, Resp: resp(503, ""), Want: rail.Ambiguous},
	{Name: "ambiguous/timeout", Action: transfer, Resp: rail.Response{TransportErr: context.DeadlineExceeded}, Want: rail.Ambiguous},
	{Name: "ambiguous/reset", Action: refundCh, Resp: rail.Response{TransportErr: errors.New("read: connection reset by peer")}, Want: rail.Ambiguous},
	{Name: "ambiguous/unexpected_422", Action: refundCh, Resp: resp(422, ""), Want: rail.Ambiguous},
	{Name: "ambiguous/proxy_408", Action: refundCh, Resp: resp(408, "timeout"), Want: rail.Ambiguous},
}

// list answers the fake rail's list requests like Stripe.
func list(c railtest.ListCall) (int, []byte, error) {
	r, a := c.Req, c.Action
	q := r.URL.Query()
	if r.Method != http.MethodGet {
		return 0, nil, fmt.Errorf("method %s, want GET", r.Method)
	}
	if v := r.Header.Get("Stripe-Version"); v != APIVersion {
		return 0, nil, fmt.Errorf("Stripe-Version %q, want %q", v, APIVersion)
	}
	if q.Get("limit") != "100" {
		return 0, nil, fmt.Errorf("limit %q, want 100", q.Get("limit"))
	}
	for k := range q {
		if strings.Contains(k, "search") {
			return 0, nil, fmt.Errorf("search is never used to reconcile")
		}
	}
	var want url.Values
	var path, object string
	since := strconv.FormatInt(c.Since.Unix(), 10)
	switch a.Kind {
	case sik.KindRefund:
		path, object = "/v1/refunds", "refund"
		if strings.HasPrefix(a.Subject, "pi_") {
			want = url.Values{"payment_intent": {a.Subject}}
		} else {
			want = url.Values{"charge": {a.Subject}}
		}
	case sik.KindPayout:
		path, object = "/v1/payouts", "payout"
		want = url.Values{"created[gte]": {since}}
	case sik.KindTransfer:
		path, object = "/v1/transfers", "transfer"
		want = url.Values{"destination": {a.Subject}, "created[gte]": {since}}
	}
	if r.URL.Path != path {
		return 0, nil, fmt.Errorf("path %s, want %s", r.URL.Path, path)
	}
	if a.Kind != sik.KindPayout && q.Get("payment_intent")+q.Get("charge")+q.Get("destination") == "" {
		// The account's listing, read before absence is claimed: every
		// entity of the kind since, whatever its payment or destination.
		want = url.Values{"created[gte]": {since}}
	}
	for _, k := range []string{"payment_intent", "charge", "destination", "created[gte]"} {
		if q.Get(k) != want.Get(k) {
			return 0, nil, fmt.Errorf("%s=%q, want %q", k, q.Get(k), want.Get(k))
		}
	}
	page, hasMore, err := railtest.CursorPage(c.Items, q.Get("starting_after"), 100)
	if err != nil {
		return 0, nil, err
	}
	data := make([]json.RawMessage, 0, len(page))
	for _, e := range page {
		md := map[string]string{"note": "x"}
		if e.Stamp != "" {
			md[sik.StampKey] = e.Stamp
		}
		o := map[string]any{
			"id": e.ID, "object": object, "amount": e.AmountMinor, "currency": strings.ToLower(e.Currency),
			"status": e.Status, "created": e.Created.Unix(), "metadata": md,
		}
		switch a.Kind {
		case sik.KindRefund:
			if strings.HasPrefix(a.Subject, "pi_") {
				o["payment_intent"], o["charge"] = a.Subject, "ch_x"
			} else {
				o["payment_intent"], o["charge"] = nil, a.Subject
			}
		default:
			o["destination"] = a.Subject
		}
		b, _ := json.Marshal(o)
		data = append(data, b)
	}
	body, _ := json.Marshal(map[string]any{"object": "list", "url": path, "has_more": hasMore, "data": data})
	return http.StatusOK, body, nil
}

// listings is how many listings Find reads to prove a's absence: a refund
// or transfer search reads the account's listing after the subject's.
func listings(a rail.Action) int {
	if a.Kind == sik.KindPayout {
		return 1
	}
	return 2
}

func fixtures() railtest.Fixtures {
	resolve := refundPI
	return railtest.Fixtures{
		Rail:             sik.RailStripe,
		Actions:          parseCases,
		Reads:            readCases,
		Malformed:        malformedCases,
		MalformedAmounts: malformedAmounts,
		Unrecognised:     unrecognisedCases,
		HeaderRule:       headerRule,
		PinnedHeaders:    map[string]string{"Stripe-Version": APIVersion},
		BodyField:        sik.StripeBodyField,
		WithBodyStamp:    withBodyStamp,
		Classify:         classifyCases,
		FindActions:      []rail.Action{refundPI, refundCh, payout, transfer},
		PageSize:         pageLimit,
		List:             list,
		Listings:         listings,
		ResolveAction:    &resolve,
	}
}

func TestConformance(t *testing.T) {
	railtest.Run(t, New, fixtures())
}

func TestParse(t *testing.T) {
	ad := New()
	for _, tc := range parseCases {
		t.Run(tc.Name, func(t *testing.T) {
			got, err := ad.Parse(tc.Req)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != rail.KindAction || !railtest.EqualAction(got.Action, tc.Want) {
				t.Fatalf("Parse = %+v, want %+v", got.Action, tc.Want)
			}
		})
	}
	for _, tc := range malformedCases {
		t.Run("malformed/"+tc.Name, func(t *testing.T) {
			_, err := ad.Parse(tc.Req)
			if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), tc.Field) {
				t.Fatalf("Parse error = %v, want ErrMalformed naming %s", err, tc.Field)
			}
		})
	}
}

// TestClassifyCheckStamp: an Applied answer carrying another stamp is a
// replayed body, not this request's entity.
func TestClassifyCheckStamp(t *testing.T) {
	ad := New()
	c := ad.Classify(refundPI, resp(200, refundJSON("re_1", "pi_1", "ch_1", 1500, "usd", stampA)))
	if got := c.CheckStamp(stampA); got.Outcome != rail.Applied {
		t.Fatalf("own stamp: %v", got.Outcome)
	}
	if got := c.CheckStamp(stampA + "-1"); got.Outcome != rail.Ambiguous || got.EntityID != "" {
		t.Fatalf("other stamp: %+v, want Ambiguous without entity", got)
	}
	unstamped := ad.Classify(refundPI, resp(200, refundJSON("re_1", "pi_1", "ch_1", 1500, "usd", "")))
	if got := unstamped.CheckStamp(stampA); got.Outcome != rail.Ambiguous {
		t.Fatalf("no stamp on a stamped request: %v", got.Outcome)
	}
}

func TestStampHeader(t *testing.T) {
	st, err := New().Stamp(payout, stampA, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Headers["Idempotency-Key"] != stampA || st.BodyField != "metadata[countersign_sik]" || st.BodyValue != stampA {
		t.Fatalf("Stamp = %+v", st)
	}
	if _, err := New().Stamp(rail.Action{Kind: "charge"}, stampA, 0); err == nil {
		t.Fatal("Stamp accepted an unknown kind")
	}
}

func TestRefusal(t *testing.T) {
	ad := New()
	for _, tc := range []struct {
		name   string
		status int
		want   string
	}{
		{"hold", 402, `{"error":{"type":"invalid_request_error","code":"held_for_approval","message":"250000 exceeds the 189900 still refundable on pi_1"}}`},
		{"unavailable", 503, `{"error":{"type":"api_error","code":"held_for_approval","message":"250000 exceeds the 189900 still refundable on pi_1"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(ad.Refusal(tc.status, "held_for_approval", "250000 exceeds the 189900 still refundable on pi_1"))
			if got != tc.want {
				t.Fatalf("Refusal =\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
}

// stripeServer serves GETs from a path → (status, body) map and records
// what it was asked.
type stripeServer struct {
	t      *testing.T
	routes map[string]string // path with query → body (200)
	seen   []string
}

func (s *stripeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.t.Errorf("%s %s: Resolve and Find only read", r.Method, r.URL)
	}
	if v := r.Header.Get("Stripe-Version"); v != APIVersion {
		s.t.Errorf("Stripe-Version %q", v)
	}
	uri, _ := url.QueryUnescape(r.URL.RequestURI())
	s.seen = append(s.seen, uri)
	body, ok := s.routes[uri]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(stripeErr("invalid_request_error", "resource_missing", "No such object: "+uri)))
		return
	}
	_, _ = w.Write([]byte(body))
}

func serve(t *testing.T, routes map[string]string) (rail.Client, *stripeServer) {
	s := &stripeServer{t: t, routes: routes}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return railtest.NewClient(srv.URL, "Bearer sk_test", srv.Client()), s
}

const (
	chargeJSON = `{"id":"ch_1","object":"charge","amount":10000,"amount_captured":9000,"amount_refunded":2500,"currency":"usd","customer":"cus_1","payment_intent":"pi_1","status":"succeeded"}`
	piPath     = "/v1/payment_intents/pi_1?expand[]=latest_charge"
)

func piJSON(latest string) string {
	return `{"id":"pi_1","object":"payment_intent","amount":10000,"amount_received":9000,"currency":"usd","customer":{"id":"cus_1","object":"customer"},"status":"succeeded","latest_charge":` + latest + `}`
}

func TestResolve(t *testing.T) {
	full := rail.Referent{Subject: "pi_1", Currency: "USD", AmountMinor: 9000, RefundableMinor: 6500, Payee: "cus_1"}
	for _, tc := range []struct {
		name    string
		action  rail.Action
		routes  map[string]string
		want    rail.Referent
		wantErr bool
	}{
		{"payment_intent_expanded_charge", refundPI, map[string]string{piPath: piJSON(chargeJSON)}, full, false},
		{"payment_intent_charge_id_only", refundPI, map[string]string{piPath: piJSON(`"ch_1"`), "/v1/charges/ch_1": chargeJSON}, full, false},
		{"payment_intent_never_charged", refundPI, map[string]string{piPath: strings.Replace(piJSON("null"), `"amount_received":9000`, `"amount_received":0`, 1)},
			rail.Referent{Subject: "pi_1", Currency: "USD", Payee: "cus_1"}, false},
		{"payment_intent_fully_refunded", refundPI, map[string]string{piPath: piJSON(strings.Replace(chargeJSON, `"amount_refunded":2500`, `"amount_refunded":9000`, 1))},
			rail.Referent{Subject: "pi_1", Currency: "USD", AmountMinor: 9000, Payee: "cus_1"}, false},
		{"charge_names_its_payment_intent", refundCh, map[string]string{"/v1/charges/ch_1": chargeJSON}, full, false},
		{"charge_without_payment_intent", refundCh, map[string]string{"/v1/charges/ch_1": strings.Replace(chargeJSON, `"payment_intent":"pi_1"`, `"payment_intent":null`, 1)},
			rail.Referent{Subject: "ch_1", Currency: "USD", AmountMinor: 9000, RefundableMinor: 6500, Payee: "cus_1"}, false},
		// Resolve reads; the value gate refuses the mismatch with its reason.
		{"currency_mismatch_is_the_gate's", rail.Action{Kind: sik.KindRefund, Subject: "pi_1", Currency: "EUR"}, map[string]string{piPath: piJSON(chargeJSON)}, rail.Referent{Subject: "pi_1", Currency: "USD", AmountMinor: 9000, RefundableMinor: 6500, Payee: "cus_1"}, false},
		{"latest_charge_absent_old_api_version", refundPI, map[string]string{piPath: `{"id":"pi_1","object":"payment_intent","amount_received":9000,"currency":"usd","charges":{"data":[]}}`}, rail.Referent{}, true},
		{"latest_charge_of_another_payment", refundPI, map[string]string{piPath: piJSON(strings.Replace(chargeJSON, `"payment_intent":"pi_1"`, `"payment_intent":"pi_2"`, 1))}, rail.Referent{}, true},
		{"answer_for_another_id", refundPI, map[string]string{piPath: strings.Replace(piJSON(chargeJSON), `"id":"pi_1"`, `"id":"pi_2"`, 1)}, rail.Referent{}, true},
		{"charge_without_amount_refunded", refundCh, map[string]string{"/v1/charges/ch_1": strings.Replace(chargeJSON, `"amount_refunded":2500,`, ``, 1)}, rail.Referent{}, true},
		{"unknown_payment", refundPI, map[string]string{}, rail.Referent{}, true},
		{"payout_needs_no_read", payout, map[string]string{}, rail.Referent{Subject: "ba_1", Currency: "USD", Payee: "ba_1"}, false},
		{"transfer_needs_no_read", transfer, map[string]string{}, rail.Referent{Subject: "acct_1", Currency: "EUR", Payee: "acct_1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := serve(t, tc.routes)
			got, err := New().Resolve(context.Background(), c, tc.action)
			if tc.wantErr {
				if !errors.Is(err, rail.ErrReferent) {
					t.Fatalf("Resolve = %+v, %v; want ErrReferent", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestFindBrokenPaging: answers that cannot prove exhaustion are errors.
func TestFindBrokenPaging(t *testing.T) {
	const first = "/v1/refunds?limit=100&payment_intent=pi_1"
	for _, tc := range []struct {
		name   string
		routes map[string]string
	}{
		{"has_more_with_empty_page", map[string]string{first: `{"object":"list","data":[],"has_more":true}`}},
		{"cursor_does_not_advance", map[string]string{
			first: `{"object":"list","data":[` + refundJSON("re_1", "pi_1", "ch_1", 1, "usd", "") + `],"has_more":true}`,
			"/v1/refunds?limit=100&payment_intent=pi_1&starting_after=re_1": `{"object":"list","data":[` + refundJSON("re_1", "pi_1", "ch_1", 1, "usd", "") + `],"has_more":true}`,
		}},
		{"item_without_id", map[string]string{first: `{"object":"list","data":[{"object":"refund","amount":1}],"has_more":false}`}},
		{"item_of_another_kind", map[string]string{first: `{"object":"list","data":[{"id":"po_1","object":"payout","amount":1}],"has_more":false}`}},
		{"has_more_missing", map[string]string{first: `{"object":"list","data":[]}`}},
		{"data_null", map[string]string{first: `{"object":"list","data":null,"has_more":false}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := serve(t, tc.routes)
			f, err := New().Find(context.Background(), c, refundPI, stampA, time.Time{})
			if err == nil || f.Exhausted || f.Match != nil {
				t.Fatalf("Find = %+v, %v; want an error, not exhausted", f, err)
			}
		})
	}
}

func TestFindRefusesBadStamp(t *testing.T) {
	c, s := serve(t, nil)
	if _, err := New().Find(context.Background(), c, refundPI, "", time.Time{}); err == nil {
		t.Fatal("Find accepted an empty stamp: every unstamped entity would match")
	}
	if len(s.seen) != 0 {
		t.Fatalf("Find called the rail: %v", s.seen)
	}
}

func FuzzParse(f *testing.F) {
	add := func(r rail.Request) {
		// One more header, so the header table is fuzzed too.
		var name, value string
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			if k != "content-type" && k != "x-countersign-distinct" {
				name, value = k, r.Headers[k]
				break
			}
		}
		f.Add(r.Method, r.Path, r.Headers["content-type"], r.Headers["x-countersign-distinct"], name, value, r.Body)
	}
	for _, tc := range parseCases {
		add(tc.Req)
	}
	for _, tc := range readCases {
		add(tc.Req)
	}
	for _, tc := range malformedCases {
		add(tc.Req)
	}
	for _, r := range malformedAmounts {
		add(r)
	}
	for _, tc := range unrecognisedCases {
		add(tc.Req)
	}
	// Metadata keys equal up to case, which Stripe would echo as two.
	for _, form := range []string{"metadata[ticket]=a&metadata[TICKET]=b", "metadata[COUNTERSIGN_SIK]=x",
		"metadata[k]=a&metadata[%E2%84%AA]=b", "metadata[countersign_sik]=x&metadata[ticket]=a"} {
		add(post("/v1/refunds", "payment_intent=pi_1&amount=1500&"+form))
	}
	ad := New()
	f.Fuzz(func(t *testing.T, method, path, contentType, distinct, name, value string, body []byte) {
		req := rail.Request{Method: method, Path: path, Body: body, Headers: map[string]string{}}
		if name != "" {
			req.Headers[strings.ToLower(name)] = value
		}
		if contentType != "" {
			req.Headers["content-type"] = contentType
		}
		if distinct != "" {
			req.Headers["x-countersign-distinct"] = distinct
		}
		p, err := ad.Parse(req)
		if cerr := railtest.CheckParsed(p, err); cerr != nil {
			t.Fatalf("Parse(%q %q %q) = %+v, %v: %v", method, path, body, p, err, cerr)
		}
		if err == nil && p.Kind == rail.KindAction {
			// The metadata Stripe echoes, with the stamp, reads one way:
			// no two keys equal up to case.
			md := map[string]string{sik.StampKey: stampA}
			for name := range p.Action.Labels {
				if k, ok := metadataKey(name); ok {
					md[k] = ""
				}
			}
			echoed, _ := json.Marshal(md)
			if err := rail.CheckAnswerJSON(echoed); err != nil {
				t.Fatalf("accepted %q, whose metadata echoed as %s is unreadable: %v", body, echoed, err)
			}
		}
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
