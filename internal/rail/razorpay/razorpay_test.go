package razorpay

import (
	"bytes"
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
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/sik"
)

func ptr(n int64) *int64 { return &n }

func post(path, body string) rail.Request {
	return rail.Request{Method: http.MethodPost, Host: "api.razorpay.com", Path: path,
		Headers: map[string]string{"content-type": "application/json"}, Body: []byte(body)}
}

func postH(path, body string, headers map[string]string) rail.Request {
	r := post(path, body)
	for k, v := range headers {
		if v == "" {
			delete(r.Headers, k)
		} else {
			r.Headers[k] = v
		}
	}
	return r
}

func getReq(path string) rail.Request {
	return rail.Request{Method: http.MethodGet, Host: "api.razorpay.com", Path: path}
}

const (
	refundPath = "/v1/payments/pay_29QQoUBi66xm2f/refund"
	payoutBody = `{"account_number":"7878780080316316","fund_account_id":"fa_00000000000001","amount":1000000,"currency":"INR","mode":"IMPS","purpose":"refund","queue_if_low_balance":true,"reference_id":"Acme Transaction ID 12345","narration":"Acme Corp Fund Transfer","notes":{"notes_key_1":"Tea, Earl Grey, Hot"}}`
)

var parseCases = []railtest.ActionCase{
	{
		Name: "refund_partial_instant_with_distinct",
		Req: postH(refundPath, `{"amount":500100,"speed":"optimum","receipt":"Receipt No. 31","notes":{"notes_key_1":"Tea, Earl Grey, Hot"}}`,
			map[string]string{"x-countersign-distinct": "goodwill refund approved by owner"}),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pay_29QQoUBi66xm2f", AmountMinor: ptr(500100),
			Extra: map[string]string{"speed": "optimum"}, Distinct: "goodwill refund approved by owner"},
	},
	{
		Name: "refund_full_without_body",
		Req:  rail.Request{Method: http.MethodPost, Path: refundPath},
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pay_29QQoUBi66xm2f", Extra: map[string]string{"speed": "normal"}},
	},
	{
		Name: "refund_full_empty_object",
		Req:  post(refundPath, ` {} `),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pay_29QQoUBi66xm2f", Extra: map[string]string{"speed": "normal"}},
	},
	{
		Name: "refund_currency_lower_case_and_labels",
		Req: postH(refundPath, `{"amount":1,"currency":"inr","speed":"normal","receipt":"r-1","notes":{"a":"b","countersign_sik":"forged"}}`,
			map[string]string{"content-type": "application/json; charset=UTF-8", "x-refund-idempotency": "sdk-random-key-1", "user-agent": "razorpay-go/1.3"}),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pay_29QQoUBi66xm2f", AmountMinor: ptr(1), Currency: "INR", Extra: map[string]string{"speed": "normal"}},
	},
	{
		Name: "refund_null_notes",
		Req:  post(refundPath, `{"notes":null}`),
		Want: rail.Action{Kind: sik.KindRefund, Subject: "pay_29QQoUBi66xm2f", Extra: map[string]string{"speed": "normal"}},
	},
	{
		Name: "payout_imps",
		Req:  post("/v1/payouts", payoutBody),
		Want: rail.Action{Kind: sik.KindPayout, Subject: "fa_00000000000001", AmountMinor: ptr(1000000), Currency: "INR", Payee: "fa_00000000000001",
			Extra: map[string]string{"account_number": "7878780080316316", "mode": "IMPS", "purpose": "refund", "queue_if_low_balance": "true"}},
	},
	{
		Name: "payout_minimal",
		Req:  post("/v1/payouts", `{"account_number":"2323230041626905","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"UPI","purpose":"cashback","queue_if_low_balance":false}`),
		Want: rail.Action{Kind: sik.KindPayout, Subject: "fa_1", AmountMinor: ptr(100), Currency: "INR", Payee: "fa_1",
			Extra: map[string]string{"account_number": "2323230041626905", "mode": "UPI", "purpose": "cashback"}},
	},
}

var readCases = []railtest.RequestCase{
	{Name: "payment", Req: getReq("/v1/payments/pay_1")},
	{Name: "payment_refunds", Req: getReq("/v1/payments/pay_1/refunds?count=10")},
	{Name: "payment_refund", Req: getReq("/v1/payments/pay_1/refunds/rfnd_1")},
	{Name: "refund", Req: getReq("/v1/refunds/rfnd_1")},
	{Name: "refunds", Req: getReq("/v1/refunds")},
	{Name: "payouts", Req: getReq("/v1/payouts?account_number=7878780080316316")},
	{Name: "payout", Req: getReq("/v1/payouts/pout_1")},
	// A list read's query: only what its path admits (query.go).
	{Name: "payment_refunds_window", Req: getReq("/v1/payments/pay_1/refunds?from=1500826740&to=1500826760&count=100&skip=0")},
	{Name: "refunds_paging", Req: getReq("/v1/refunds?count=1&skip=10&from=1700000000&to=1800000000")},
	{Name: "refunds_escaped_name", Req: getReq("/v1/refunds?co%75nt=100")},
	{Name: "refunds_empty_query", Req: getReq("/v1/refunds?")},
	{Name: "payouts_filtered", Req: getReq("/v1/payouts?account_number=7878780080316316&contact_id=cont_1&fund_account_id=fa_1&mode=IMPS&reference_id=Acme+Transaction+ID+12345&status=processed&from=1700000000&to=1800000000&count=100&skip=100")},
	// What Find sends (find.go: url.Values encodes in name order).
	{Name: "find_refunds", Req: getReq("/v1/payments/pay_1/refunds?count=100&skip=200")},
	{Name: "find_payouts", Req: getReq("/v1/payouts?account_number=7878780080316316&count=100&from=1700000000&skip=100")},
}

func manyNotes(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

var malformedCases = []railtest.MalformedCase{
	{Name: "body_array", Req: post(refundPath, `[{"amount":1}]`), Field: "body"},
	{Name: "body_string", Req: post(refundPath, `"amount"`), Field: "body"},
	{Name: "body_not_json", Req: post(refundPath, `{amount:1}`), Field: "body"},
	{Name: "body_two_objects", Req: post(refundPath, `{}{"amount":1}`), Field: "body"},
	{Name: "body_truncated", Req: post(refundPath, `{"amount":1`), Field: "body"},
	// Space JSON does not skip: Razorpay cannot read the body as the
	// parse would if it trimmed it (it might see no amount: a full refund).
	{Name: "body_led_by_form_feed", Req: post(refundPath, "\f{\"amount\":100}"), Field: "body"},
	{Name: "body_led_by_no_break_space", Req: post(refundPath, "\u00a0{\"amount\":100}"), Field: "body"},
	{Name: "body_form_feed_alone", Req: post(refundPath, "\f"), Field: "body"},
	// PHP's json_decode fails on a lone surrogate escape (Go reads U+FFFD):
	// Razorpay would read none of the body.
	{Name: "lone_surrogate_in_receipt", Req: post(refundPath, `{"amount":100,"receipt":"\ud800"}`), Field: "body"},
	{Name: "lone_surrogate_in_a_note", Req: post(refundPath, `{"amount":100,"notes":{"k":"\udc00x"}}`), Field: "body"},
	{Name: "body_not_utf8", Req: post(refundPath, "{\"receipt\":\"\xff\"}"), Field: "body"},
	{Name: "body_too_deep", Req: post(refundPath, `{"x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`}`), Field: "body"},
	{Name: "amount_null", Req: post(refundPath, `{"amount":null}`), Field: "amount"},
	{Name: "amount_string_integer", Req: post(refundPath, `{"amount":"100"}`), Field: "amount"},
	{Name: "amount_bool", Req: post(refundPath, `{"amount":true}`), Field: "amount"},
	{Name: "amount_object", Req: post(refundPath, `{"amount":{"value":1}}`), Field: "amount"},
	{Name: "amount_point_zero", Req: post(refundPath, `{"amount":100.0}`), Field: "amount"},
	{Name: "amount_upper_exponent", Req: post(refundPath, `{"amount":1E3}`), Field: "amount"},
	{Name: "amount_negative_zero", Req: post(refundPath, `{"amount":-0}`), Field: "amount"},
	{Name: "amount_escaped_key_duplicate", Req: post(refundPath, `{"amount":1,"am\u006funt":100000}`), Field: "amount"},
	{Name: "currency_duplicate", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":1,"currency":"INR","currency":"USD"}`), Field: "currency"},
	{Name: "currency_number", Req: post(refundPath, `{"currency":356}`), Field: "currency"},
	{Name: "currency_word", Req: post(refundPath, `{"currency":"rupee"}`), Field: "currency"},
	{Name: "notes_duplicate_key", Req: post(refundPath, `{"notes":{"a":"1","a":"2"}}`), Field: "notes.a"},
	{Name: "notes_string", Req: post(refundPath, `{"notes":"x"}`), Field: "notes"},
	{Name: "notes_non_empty_array", Req: post(refundPath, `{"notes":["x"]}`), Field: "notes"},
	{Name: "notes_full", Req: post(refundPath, `{"notes":`+manyNotes(15)+`}`), Field: "notes"},
	{Name: "speed_number", Req: post(refundPath, `{"speed":1}`), Field: "speed"},
	{Name: "payout_without_fund_account", Req: post("/v1/payouts", `{"account_number":"1","amount":1,"currency":"INR"}`), Field: "fund_account_id"},
	{Name: "payout_composite_fund_account", Req: post("/v1/payouts", `{"account_number":"1","fund_account":{"account_type":"vpa"},"amount":1,"currency":"INR"}`), Field: "fund_account_id"},
	{Name: "payout_fund_account_not_an_id", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa 1","amount":1,"currency":"INR"}`), Field: "fund_account_id"},
	{Name: "payout_without_account_number", Req: post("/v1/payouts", `{"fund_account_id":"fa_1","amount":1,"currency":"INR"}`), Field: "account_number"},
	{Name: "payout_without_amount", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","currency":"INR"}`), Field: "amount"},
	{Name: "payout_without_currency", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":1}`), Field: "currency"},
	{Name: "payout_mode_number", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":1,"currency":"INR","mode":5}`), Field: "mode"},
	{Name: "form_body", Req: postH(refundPath, `amount=100`, map[string]string{"content-type": "application/x-www-form-urlencoded"}), Field: "content-type"},
	{Name: "untyped_body", Req: postH(refundPath, `{"amount":100}`, map[string]string{"content-type": ""}), Field: "content-type"},
	{Name: "query_on_post", Req: post(refundPath+"?amount=100000", `{"amount":1}`), Field: "query"},
	{Name: "distinct_not_utf8", Req: postH(refundPath, `{}`, map[string]string{"x-countersign-distinct": "\xff"}), Field: "x-countersign-distinct"},
	{Name: "distinct_too_long", Req: postH(refundPath, `{}`, map[string]string{"x-countersign-distinct": strings.Repeat("é", 501)}), Field: "x-countersign-distinct"},
	{Name: "unknown_member", Req: post(refundPath, `{"future_field":{"x":1}}`), Field: "future_field"},
	{Name: "member_other_case", Req: post(refundPath, `{"Amount":100}`), Field: "Amount"},
	{Name: "member_trailing_space", Req: post(refundPath, `{"amount ":100}`), Field: "amount "},
	{Name: "amount_zero", Req: post(refundPath, `{"amount":0}`), Field: "amount"},
	{Name: "amount_leading_zero", Req: post(refundPath, `{"amount":0100}`), Field: "body"},
	{Name: "amount_plus", Req: post(refundPath, `{"amount":+100}`), Field: "body"},
	{Name: "notes_empty_array", Req: post(refundPath, `{"notes":[]}`), Field: "notes"},
	{Name: "notes_nested", Req: post(refundPath, `{"notes":{"a":{"b":1}}}`), Field: "notes"},
	{Name: "notes_number", Req: post(refundPath, `{"notes":{"a":1}}`), Field: "notes"},
	{Name: "notes_value_too_long", Req: post(refundPath, `{"notes":{"a":"`+strings.Repeat("v", 257)+`"}}`), Field: "notes"},
	{Name: "speed_unknown", Req: post(refundPath, `{"speed":"instant"}`), Field: "speed"},
	{Name: "speed_other_case", Req: post(refundPath, `{"speed":"Normal"}`), Field: "speed"},
	{Name: "speed_null", Req: post(refundPath, `{"speed":null}`), Field: "speed"},
	{Name: "receipt_number", Req: post(refundPath, `{"receipt":12}`), Field: "receipt"},
	{Name: "payout_currency_lower_case", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"inr","mode":"IMPS","purpose":"refund"}`), Field: "currency"},
	{Name: "payout_without_mode", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","purpose":"refund"}`), Field: "mode"},
	{Name: "payout_mode_lower_case", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"imps","purpose":"refund"}`), Field: "mode"},
	{Name: "payout_without_purpose", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"IMPS"}`), Field: "purpose"},
	{Name: "payout_purpose_card_number", Req: post("/v1/payouts", payoutWithPurpose(`"4111111111111111 12/29 123"`)), Field: "purpose"},
	{Name: "payout_purpose_upper_case", Req: post("/v1/payouts", payoutWithPurpose(`"Refund"`)), Field: "purpose"},
	{Name: "payout_purpose_too_long", Req: post("/v1/payouts", payoutWithPurpose(`"`+strings.Repeat("p", 31)+`"`)), Field: "purpose"},
	{Name: "payout_purpose_two_spaces", Req: post("/v1/payouts", payoutWithPurpose(`"utility  bill"`)), Field: "purpose"},
	{Name: "payout_purpose_leading_space", Req: post("/v1/payouts", payoutWithPurpose(`" refund"`)), Field: "purpose"},
	{Name: "payout_purpose_trailing_space", Req: post("/v1/payouts", payoutWithPurpose(`"refund "`)), Field: "purpose"},
	{Name: "payout_purpose_leading_digit", Req: post("/v1/payouts", payoutWithPurpose(`"4111111111111111"`)), Field: "purpose"},
	{Name: "payout_purpose_hyphen", Req: post("/v1/payouts", payoutWithPurpose(`"vendor-bill"`)), Field: "purpose"},
	{Name: "payout_purpose_empty", Req: post("/v1/payouts", payoutWithPurpose(`""`)), Field: "purpose"},
	{Name: "payout_purpose_number", Req: post("/v1/payouts", payoutWithPurpose(`4111111111111111`)), Field: "purpose"},
	{Name: "payout_queue_string", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"IMPS","purpose":"refund","queue_if_low_balance":"true"}`), Field: "queue_if_low_balance"},
	{Name: "payout_narration_symbols", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"IMPS","purpose":"refund","narration":"pay-out!"}`), Field: "narration"},
	{Name: "payout_reference_too_long", Req: post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"IMPS","purpose":"refund","reference_id":"`+strings.Repeat("r", 41)+`"}`), Field: "reference_id"},
	{Name: "charset_latin1", Req: postH(refundPath, `{}`, map[string]string{"content-type": "application/json; charset=latin1"}), Field: "content-type"},
	{Name: "gzip_body", Req: postH(refundPath, `{}`, map[string]string{"content-encoding": "gzip"}), Field: "content-encoding"},
	{Name: "read_with_body", Req: rail.Request{Method: http.MethodGet, Path: "/v1/payments/pay_1", Body: []byte(`{}`)}, Field: "body"},
	// A read's query: strict, and only what its path admits (query.go).
	{Name: "read_expand_card", Req: getReq("/v1/payments/pay_1?expand[]=card"), Field: "expand[]"},
	{Name: "read_expand_escaped", Req: getReq("/v1/payments/pay_1?expand%5B%5D=upi"), Field: "expand[]"},
	{Name: "read_expand_name_escaped", Req: getReq("/v1/payments/pay_1?%65xpand%5b%5d=emi"), Field: "expand[]"},
	{Name: "read_expand_indexed", Req: getReq("/v1/payments/pay_1?expand[0]=offers"), Field: "expand[0]"},
	{Name: "read_expand_bare", Req: getReq("/v1/payments/pay_1?expand=card"), Field: "expand"},
	{Name: "read_expand_on_list", Req: getReq("/v1/payments/pay_1/refunds?count=10&expand[]=payment"), Field: "expand[]"},
	{Name: "read_expand_on_payouts", Req: getReq("/v1/payouts?account_number=7878780080316316&expand[]=fund_account.contact"), Field: "expand[]"},
	{Name: "read_payment_takes_no_query", Req: getReq("/v1/payments/pay_1?count=1"), Field: "count"},
	{Name: "read_refund_takes_no_query", Req: getReq("/v1/refunds/rfnd_1?x=%00%0d%0a"), Field: "x"},
	{Name: "read_payment_refund_takes_no_query", Req: getReq("/v1/payments/pay_1/refunds/rfnd_1?count=1"), Field: "count"},
	{Name: "read_payout_takes_no_query", Req: getReq("/v1/payouts/pout_1?account_number=1"), Field: "account_number"},
	{Name: "read_unknown_member", Req: getReq("/v1/payments/pay_1/refunds?count=100&anything=goes"), Field: "anything"},
	{Name: "read_member_of_another_list", Req: getReq("/v1/refunds?account_number=7878780080316316"), Field: "account_number"},
	{Name: "read_member_in_brackets", Req: getReq("/v1/refunds?count[]=1"), Field: "count[]"},
	{Name: "read_member_php_spelling", Req: getReq("/v1/payouts?account_number=1&account.number=2"), Field: "account.number"},
	{Name: "read_control_name_quoted", Req: getReq("/v1/refunds?%0d%0a=1"), Field: `"\r\n"`},
	{Name: "read_member_repeated", Req: getReq("/v1/refunds?count=10&count=100"), Field: "count"},
	{Name: "read_member_repeated_escaped", Req: getReq("/v1/payouts?account_number=1&%61ccount%5Fnumber=2"), Field: "account_number"},
	{Name: "read_member_empty", Req: getReq("/v1/refunds?from="), Field: "from"},
	{Name: "read_count_too_large", Req: getReq("/v1/refunds?count=101"), Field: "count"},
	{Name: "read_count_zero", Req: getReq("/v1/refunds?count=0"), Field: "count"},
	{Name: "read_count_leading_zero", Req: getReq("/v1/refunds?count=010"), Field: "count"},
	{Name: "read_skip_negative", Req: getReq("/v1/refunds?skip=-1"), Field: "skip"},
	{Name: "read_time_signed", Req: getReq("/v1/refunds?from=%2B1700000000"), Field: "from"},
	{Name: "read_time_not_digits", Req: getReq("/v1/payments/pay_1/refunds?to=2024-01-01"), Field: "to"},
	{Name: "read_payouts_without_account", Req: getReq("/v1/payouts?count=10"), Field: "account_number"},
	{Name: "read_payouts_no_query", Req: getReq("/v1/payouts"), Field: "account_number"},
	{Name: "read_payouts_account_not_an_id", Req: getReq("/v1/payouts?account_number=1%26expand%5B%5D%3Dcard"), Field: "account_number"},
	{Name: "read_payouts_mode_unknown", Req: getReq("/v1/payouts?account_number=1&mode=imps"), Field: "mode"},
	{Name: "read_payouts_status_unknown", Req: getReq("/v1/payouts?account_number=1&status=everything"), Field: "status"},
	{Name: "read_payouts_contact_not_an_id", Req: getReq("/v1/payouts?account_number=1&contact_id=cont%201"), Field: "contact_id"},
	{Name: "read_payouts_reference_control", Req: getReq("/v1/payouts?account_number=1&reference_id=a%0Ab"), Field: "reference_id"},
	{Name: "read_payouts_reference_too_long", Req: getReq("/v1/payouts?account_number=1&reference_id=" + strings.Repeat("r", 41)), Field: "reference_id"},
	{Name: "read_bad_escape", Req: getReq("/v1/refunds?count=%zz"), Field: "query"},
	{Name: "read_bad_escape_in_name", Req: getReq("/v1/refunds?co%2=1"), Field: "query"},
	{Name: "read_semicolon", Req: getReq("/v1/refunds?count=1;expand[]=card"), Field: "query"},
	{Name: "read_piece_without_value", Req: getReq("/v1/refunds?count"), Field: "query"},
	{Name: "read_empty_piece", Req: getReq("/v1/refunds?count=1&&skip=1"), Field: "query"},
	{Name: "read_empty_name", Req: getReq("/v1/refunds?=1"), Field: "query"},
	{Name: "read_leading_question_mark", Req: getReq("/v1/refunds??count=1"), Field: "query"},
	{Name: "read_not_utf8", Req: getReq("/v1/payouts?account_number=1&reference_id=%ff"), Field: "query"},
}

// payoutWithPurpose is a payout whose purpose member is the JSON purpose.
func payoutWithPurpose(purpose string) string {
	return `{"account_number":"1","fund_account_id":"fa_1","amount":100,"currency":"INR","mode":"IMPS","purpose":` + purpose + `}`
}

var malformedAmounts = map[string]rail.Request{
	"fraction":    post(refundPath, `{"amount":10.5}`),
	"exponent":    post("/v1/payouts", `{"account_number":"1","fund_account_id":"fa_1","amount":1e3,"currency":"INR"}`),
	"negative":    post(refundPath, `{"amount":-1}`),
	"non_numeric": post(refundPath, `{"amount":"abc"}`),
	"duplicate":   post(refundPath, `{"amount":1,"speed":"normal","amount":100000}`),
	"overflow":    post(refundPath, `{"amount":99999999999999999999}`),
}

var unrecognisedCases = []railtest.RequestCase{
	{Name: "capture_payment", Req: post("/v1/payments/pay_1/capture", `{"amount":100}`)},
	{Name: "refunds_plural_post", Req: post("/v1/payments/pay_1/refunds", `{}`)},
	{Name: "create_refund_at_root", Req: post("/v1/refunds", `{"payment_id":"pay_1"}`)},
	{Name: "update_refund", Req: rail.Request{Method: http.MethodPatch, Path: "/v1/refunds/rfnd_1", Body: []byte(`{}`)}},
	{Name: "cancel_payout", Req: post("/v1/payouts/pout_1/cancel", `{}`)},
	{Name: "route_transfer", Req: post("/v1/transfers", `{"amount":1}`)},
	{Name: "payment_transfer", Req: post("/v1/payments/pay_1/transfers", `{}`)},
	{Name: "orders", Req: getReq("/v1/orders")},
	{Name: "encoded_id", Req: post("/v1/payments/pay%5F1/refund", `{}`)},
	{Name: "v2", Req: post("/v2/payments/pay_1/refund", `{}`)},
	{Name: "on_behalf_of_sub_merchant", Req: postH(refundPath, `{}`, map[string]string{"x-razorpay-account": "acc_1"})},
	{Name: "sub_merchant_read", Req: rail.Request{Method: http.MethodGet, Path: "/v1/payments/pay_1", Headers: map[string]string{"x-razorpay-account": "acc_1"}}},
	{Name: "unknown_razorpay_header", Req: postH(refundPath, `{}`, map[string]string{"x-razorpay-new-thing": "1"})},
	{Name: "method_override", Req: postH(refundPath, `{}`, map[string]string{"x-http-method-override": "PATCH"})},
}

func headerRule(kind sik.Kind, name, value string) error {
	ok := func(c byte, space bool) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || space && c == ' '
	}
	switch kind {
	case sik.KindRefund:
		if name != "X-Refund-Idempotency" {
			return fmt.Errorf("refund header %q", name)
		}
		if len(value) < 10 {
			return fmt.Errorf("refund key %q shorter than 10", value)
		}
	case sik.KindPayout:
		if name != "X-Payout-Idempotency" {
			return fmt.Errorf("payout header %q", name)
		}
		if len(value) < 4 || len(value) > 36 {
			return fmt.Errorf("payout key %q not 4-36 characters", value)
		}
	default:
		return fmt.Errorf("no %s on Razorpay", kind)
	}
	for i := 0; i < len(value); i++ {
		if !ok(value[i], kind == sik.KindPayout) {
			return fmt.Errorf("key %q has %q", value, value[i])
		}
	}
	return nil
}

// withBodyStamp sets notes.countersign_sik as ext_proc would, keeping
// numbers exact.
func withBodyStamp(req rail.Request, value string) (rail.Request, error) {
	obj := map[string]any{}
	if len(bytes.TrimSpace(req.Body)) > 0 {
		d := json.NewDecoder(bytes.NewReader(req.Body))
		d.UseNumber()
		if err := d.Decode(&obj); err != nil {
			return req, err
		}
	}
	notes, _ := obj["notes"].(map[string]any)
	if notes == nil {
		notes = map[string]any{}
	}
	notes[sik.StampKey] = value
	obj["notes"] = notes
	body, err := json.Marshal(obj)
	if err != nil {
		return req, err
	}
	req.Body = body
	req.Headers["content-type"] = "application/json"
	return req, nil
}

const stampA = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

var (
	refund = rail.Action{Kind: sik.KindRefund, Subject: "pay_1", AmountMinor: ptr(500100), Extra: map[string]string{"speed": "normal"}}
	full   = rail.Action{Kind: sik.KindRefund, Subject: "pay_1", Extra: map[string]string{"speed": "normal"}}
	payout = rail.Action{Kind: sik.KindPayout, Subject: "fa_1", AmountMinor: ptr(1000000), Currency: "INR", Payee: "fa_1",
		Extra: map[string]string{"account_number": "7878780080316316", "mode": "IMPS"}}
)

func resp(status int, body string) rail.Response {
	return rail.Response{Status: status, Body: []byte(body)}
}

func rzpErr(code, desc string) string {
	return fmt.Sprintf(`{"error":{"code":%q,"description":%q,"source":"business","step":"payment_initiation","reason":"input_validation_failed","metadata":{}}}`, code, desc)
}

func refundJSON(id, payment string, amount int64, notes string) string {
	return fmt.Sprintf(`{"id":%q,"entity":"refund","amount":%d,"currency":"INR","payment_id":%q,"notes":%s,"receipt":null,"acquirer_data":{"arn":null},"created_at":1597078866,"batch_id":null,"status":"processed","speed_processed":"normal","speed_requested":"normal"}`,
		id, amount, payment, notes)
}

const payoutJSON = `{"id":"pout_1","entity":"payout","fund_account_id":"fa_1","amount":1000000,"currency":"INR","notes":{"countersign_sik":"` + stampA + `"},"fees":590,"tax":90,"status":"processing","purpose":"refund","utr":null,"mode":"IMPS","reference_id":null,"created_at":1545383037}`

// classifyCases: one or more per row of DESIGN.md §4, named by the row.
var classifyCases = []railtest.ClassifyCase{
	// Row 1: 2xx with the created entity → Applied.
	{Name: "applied/refund", Action: refund, Resp: resp(200, refundJSON("rfnd_1", "pay_1", 500100, `{"countersign_sik":"`+stampA+`"}`)),
		Want: rail.Applied, WantEntityID: "rfnd_1", WantStamp: stampA},
	{Name: "applied/full_refund_notes_empty_array", Action: full, Resp: resp(200, refundJSON("rfnd_2", "pay_1", 9900, `[]`)),
		Want: rail.Applied, WantEntityID: "rfnd_2"},
	{Name: "applied/payout_fees_include_tax", Action: payout, Resp: resp(200, payoutJSON),
		Want: rail.Applied, WantEntityID: "pout_1", WantFeeMinor: 590, WantStamp: stampA},
	{Name: "applied?/replayed_other_payment", Action: refund, Resp: resp(200, refundJSON("rfnd_9", "pay_OTHER", 500100, `[]`)), Want: rail.Ambiguous},
	{Name: "applied?/other_amount", Action: refund, Resp: resp(200, refundJSON("rfnd_9", "pay_1", 1, `[]`)), Want: rail.Ambiguous},
	{Name: "applied?/payment_entity", Action: refund, Resp: resp(200, `{"id":"pay_1","entity":"payment","amount":500100,"currency":"INR"}`), Want: rail.Ambiguous},
	{Name: "applied?/payout_to_other_fund_account", Action: payout, Resp: resp(200, strings.Replace(payoutJSON, `"fa_1"`, `"fa_2"`, 1)), Want: rail.Ambiguous},
	{Name: "applied?/payout_other_currency", Action: payout, Resp: resp(200, strings.Replace(payoutJSON, `"INR"`, `"USD"`, 1)), Want: rail.Ambiguous},
	{Name: "applied?/error_body_with_200", Action: refund, Resp: resp(200, rzpErr("SERVER_ERROR", "boom")), Want: rail.Ambiguous},
	// Row 2: 409 → InProgress.
	{Name: "in_progress/409", Action: refund, Resp: resp(409, rzpErr("BAD_REQUEST_ERROR", "A request with the same idempotency key is still being processed. Retry after some time.")), Want: rail.InProgress},
	{Name: "in_progress/409_no_body", Action: payout, Resp: resp(409, ""), Want: rail.InProgress},
	// Row 3: "Different request with the same idempotency key" → FingerprintMismatch.
	{Name: "fingerprint_mismatch/different_request", Action: refund, Resp: resp(400, rzpErr("BAD_REQUEST_ERROR", "Different request with the same idempotency key has already been processed.")), Want: rail.FingerprintMismatch},
	{Name: "fingerprint_mismatch/payload_mismatch_wording", Action: payout, Resp: resp(400, rzpErr("BAD_REQUEST_ERROR", "Idempotency key payload mismatch")), Want: rail.FingerprintMismatch},
	{Name: "fingerprint_mismatch/on_409", Action: payout, Resp: resp(409, rzpErr("BAD_REQUEST_ERROR", "Different request with the same idempotency key")), Want: rail.FingerprintMismatch},
	// Row 4: 400/404 BAD_REQUEST_ERROR → Rejected.
	{Name: "rejected/400_amount_exceeds", Action: refund, Resp: resp(400, rzpErr("BAD_REQUEST_ERROR", "The refund amount provided is greater than amount captured")), Want: rail.Rejected},
	{Name: "rejected/400_id_does_not_exist", Action: refund, Resp: resp(400, rzpErr("BAD_REQUEST_ERROR", "The id provided does not exist")), Want: rail.Rejected},
	{Name: "rejected/404", Action: full, Resp: resp(404, rzpErr("BAD_REQUEST_ERROR", "The requested URL was not found on the server.")), Want: rail.Rejected},
	{Name: "rejected/400_idempotency_key_missing", Action: payout, Resp: resp(400, rzpErr("BAD_REQUEST_ERROR", "Idempotency key is missing. Include idempotency header and key in the request.")), Want: rail.Rejected},
	// Row 5: 401 and 429 → Rejected.
	{Name: "rejected/401", Action: refund, Resp: resp(401, rzpErr("BAD_REQUEST_ERROR", "Authentication failed")), Want: rail.Rejected},
	{Name: "rejected/429", Action: payout, Resp: resp(429, rzpErr("BAD_REQUEST_ERROR", "Too many requests")), Want: rail.Rejected},
	// Row 6: 5xx, transport → Ambiguous.
	{Name: "ambiguous/500_server_error", Action: refund, Resp: resp(500, rzpErr("SERVER_ERROR", "The server encountered an error. The incident has been reported to admins.")), Want: rail.Ambiguous},
	{Name: "ambiguous/502", Action: payout, Resp: resp(502, ""), Want: rail.Ambiguous},
	{Name: "ambiguous/gateway_error_on_400", Action: refund, Resp: resp(400, rzpErr("GATEWAY_ERROR", "Payment processing failed due to error at bank or wallet gateway")), Want: rail.Ambiguous},
	{Name: "ambiguous/timeout", Action: refund, Resp: rail.Response{TransportErr: context.DeadlineExceeded}, Want: rail.Ambiguous},
	{Name: "ambiguous/unexpected_422", Action: payout, Resp: resp(422, ""), Want: rail.Ambiguous},
}

// lister answers list requests like Razorpay and records the skips.
type lister struct {
	mu    sync.Mutex
	skips []int
}

func (l *lister) list(c railtest.ListCall) (int, []byte, error) {
	r, a := c.Req, c.Action
	q := r.URL.Query()
	if r.Method != http.MethodGet {
		return 0, nil, fmt.Errorf("method %s", r.Method)
	}
	if q.Get("count") != "100" {
		return 0, nil, fmt.Errorf("count %q, want 100", q.Get("count"))
	}
	skip, err := strconv.Atoi(q.Get("skip"))
	if err != nil || skip < 0 {
		return 0, nil, fmt.Errorf("skip %q", q.Get("skip"))
	}
	var object string
	switch a.Kind {
	case sik.KindRefund:
		object = "refund"
		if want := "/v1/payments/" + a.Subject + "/refunds"; r.URL.Path != want {
			return 0, nil, fmt.Errorf("path %s, want %s", r.URL.Path, want)
		}
		if q.Has("from") || q.Has("account_number") {
			return 0, nil, fmt.Errorf("unexpected filter in %s", r.URL.RawQuery)
		}
	case sik.KindPayout:
		object = "payout"
		if r.URL.Path != "/v1/payouts" {
			return 0, nil, fmt.Errorf("path %s", r.URL.Path)
		}
		if q.Get("account_number") != a.Extra["account_number"] {
			return 0, nil, fmt.Errorf("account_number %q", q.Get("account_number"))
		}
		if want := strconv.FormatInt(c.Since.Unix(), 10); q.Get("from") != want {
			return 0, nil, fmt.Errorf("from %q, want %s", q.Get("from"), want)
		}
	}
	l.mu.Lock()
	l.skips = append(l.skips, skip)
	l.mu.Unlock()
	page := railtest.OffsetPage(c.Items, skip, 100)
	items := make([]json.RawMessage, 0, len(page))
	for i, e := range page {
		var notes any = []any{} // Razorpay writes empty notes as []
		if e.Stamp != "" {
			notes = map[string]string{sik.StampKey: e.Stamp, "order": "1"}
		} else if i%2 == 0 {
			notes = map[string]string{"order": "1"}
		}
		o := map[string]any{"id": e.ID, "entity": object, "amount": e.AmountMinor, "currency": e.Currency,
			"status": e.Status, "created_at": e.Created.Unix(), "notes": notes}
		if a.Kind == sik.KindRefund {
			o["payment_id"] = a.Subject
		} else {
			o["fund_account_id"] = a.Subject
		}
		b, _ := json.Marshal(o)
		items = append(items, b)
	}
	body, _ := json.Marshal(map[string]any{"entity": "collection", "count": len(items), "items": items})
	return http.StatusOK, body, nil
}

func (l *lister) seenSkips() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.skips)
}

func fixtures() railtest.Fixtures {
	resolve := refund
	return railtest.Fixtures{
		Rail:             sik.RailRazorpay,
		Actions:          parseCases,
		Reads:            readCases,
		Malformed:        malformedCases,
		MalformedAmounts: malformedAmounts,
		Unrecognised:     unrecognisedCases,
		HeaderRule:       headerRule,
		BodyField:        sik.RazorpayBodyField,
		WithBodyStamp:    withBodyStamp,
		Classify:         classifyCases,
		FindActions:      []rail.Action{refund, payout},
		PageSize:         pageCount,
		List:             (&lister{}).list,
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

func TestRefusal(t *testing.T) {
	ad := New()
	got := string(ad.Refusal(402, "amount_over_refundable", "250000 exceeds the 189900 still refundable on pay_1002"))
	want := `{"error":{"code":"BAD_REQUEST_ERROR","description":"250000 exceeds the 189900 still refundable on pay_1002","reason":"amount_over_refundable"}}`
	if got != want {
		t.Fatalf("Refusal =\n %s\nwant\n %s", got, want)
	}
	if got := string(ad.Refusal(503, "ledger_unavailable", "try later")); !strings.Contains(got, `"SERVER_ERROR"`) {
		t.Fatalf("5xx refusal %s", got)
	}
}

func TestStampHeaders(t *testing.T) {
	ad := New()
	for _, tc := range []struct {
		a      rail.Action
		header string
	}{{refund, "X-Refund-Idempotency"}, {payout, "X-Payout-Idempotency"}} {
		st, err := ad.Stamp(tc.a, stampA, 1295) // longest generation that fits: "-zz"
		if err != nil {
			t.Fatal(err)
		}
		if st.Headers[tc.header] != stampA+"-zz" || st.BodyField != "notes.countersign_sik" {
			t.Fatalf("Stamp(%s) = %+v", tc.a.Kind, st)
		}
	}
	if _, err := ad.Stamp(rail.Action{Kind: "charge"}, stampA, 0); err == nil {
		t.Fatal("Stamp accepted an unknown kind")
	}
}

func TestCheckKey(t *testing.T) {
	for _, tc := range []struct {
		kind sik.Kind
		key  string
		ok   bool
	}{
		{sik.KindRefund, "abcdefghij", true},
		{sik.KindRefund, "abcdefghi", false},
		{sik.KindRefund, strings.Repeat("a", 100), true},
		{sik.KindRefund, "abcdefghi!", false},
		{sik.KindPayout, "abcd", true},
		{sik.KindPayout, "abc", false},
		{sik.KindPayout, strings.Repeat("a", 36), true},
		{sik.KindPayout, strings.Repeat("a", 37), false},
	} {
		if err := checkKey(tc.kind, tc.key); (err == nil) != tc.ok {
			t.Errorf("checkKey(%s, %q) = %v, want ok=%v", tc.kind, tc.key, err, tc.ok)
		}
	}
}

func serve(t *testing.T, status int, body string) rail.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/payments/pay_1" {
			t.Errorf("unexpected %s %s", r.Method, r.URL)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return railtest.NewClient(srv.URL, "Basic cnpwOng=", srv.Client())
}

func paymentJSON(status string, amount, refunded int64) string {
	return fmt.Sprintf(`{"id":"pay_1","entity":"payment","amount":%d,"currency":"INR","status":%q,"method":"card","amount_refunded":%d,"refund_status":null,"captured":true,"customer_id":"cust_1","notes":[],"created_at":1545383037}`,
		amount, status, refunded)
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		action  rail.Action
		status  int
		body    string
		want    rail.Referent
		wantErr bool
	}{
		{"captured_partly_refunded", refund, 200, paymentJSON("captured", 1000000, 250000),
			rail.Referent{Subject: "pay_1", Currency: "INR", AmountMinor: 1000000, RefundableMinor: 750000, Payee: "cust_1"}, false},
		{"fully_refunded", refund, 200, paymentJSON("refunded", 1000000, 1000000),
			rail.Referent{Subject: "pay_1", Currency: "INR", AmountMinor: 1000000, Payee: "cust_1"}, false},
		{"authorized_not_captured", refund, 200, paymentJSON("authorized", 1000000, 0),
			rail.Referent{Subject: "pay_1", Currency: "INR", AmountMinor: 1000000, Payee: "cust_1"}, false},
		{"no_customer", refund, 200, strings.Replace(paymentJSON("captured", 100, 0), `"cust_1"`, `null`, 1),
			rail.Referent{Subject: "pay_1", Currency: "INR", AmountMinor: 100, RefundableMinor: 100}, false},
		// Resolve reads; the value gate refuses the mismatch with its reason.
		{"currency_mismatch_is_the_gate's", rail.Action{Kind: sik.KindRefund, Subject: "pay_1", Currency: "USD"}, 200, paymentJSON("captured", 100, 0), rail.Referent{Subject: "pay_1", Currency: "INR", AmountMinor: 100, RefundableMinor: 100, Payee: "cust_1"}, false},
		{"another_payment", refund, 200, strings.Replace(paymentJSON("captured", 100, 0), `"pay_1"`, `"pay_2"`, 1), rail.Referent{}, true},
		{"no_amount_refunded", refund, 200, strings.Replace(paymentJSON("captured", 100, 0), `"amount_refunded":0,`, ``, 1), rail.Referent{}, true},
		{"unknown_payment", refund, 400, rzpErr("BAD_REQUEST_ERROR", "The id provided does not exist"), rail.Referent{}, true},
		{"payout_needs_no_read", payout, 500, "", rail.Referent{Subject: "fa_1", Currency: "INR", Payee: "fa_1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c rail.Client
			if tc.action.Kind == sik.KindRefund {
				c = serve(t, tc.status, tc.body)
			}
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

// findOn runs Find for a against a FakeRail holding n refunds with the
// target at position at, after applying setup to the rail.
func findOn(t *testing.T, a rail.Action, n, at int, setup func(*railtest.FakeRail)) (*lister, railtest.Listed, rail.Finding, error) {
	t.Helper()
	now := time.Unix(1_760_000_000, 0)
	items := make([]railtest.Listed, n)
	for i := range items {
		items[i] = railtest.Listed{ID: fmt.Sprintf("rfnd_%04d", i), AmountMinor: 500100, Currency: "INR", Status: "processed",
			Created: now.Add(-time.Duration(i) * time.Second)}
	}
	var target railtest.Listed
	if at >= 0 {
		items[at].Stamp = stampA
		target = items[at]
	}
	l := &lister{}
	fake := railtest.NewFakeRail(t, l.list, a, now.Add(-time.Hour), items)
	if setup != nil {
		setup(fake)
	}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	f, err := New().Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), a, stampA, now.Add(-time.Hour))
	return l, target, f, err
}

// TestFindOffsetInsert is the offset-paging hazard: the rail inserts new
// refunds after serving page 1, shifting every later page. Find must still
// see the target wherever it sits around the page boundary.
func TestFindOffsetInsert(t *testing.T) {
	for _, inserts := range []int{1, 3, 10} {
		for at := 80; at <= 120; at += 5 {
			t.Run(fmt.Sprintf("inserts_%d_target_at_%d", inserts, at), func(t *testing.T) {
				_, target, f, err := findOn(t, refund, 230, at, func(fr *railtest.FakeRail) {
					fr.After(func(n int, fr *railtest.FakeRail) {
						if n == 1 {
							for i := range inserts {
								fr.Insert(railtest.Listed{ID: fmt.Sprintf("rfnd_new%d", i), AmountMinor: 500100, Currency: "INR", Created: time.Unix(1_760_000_001, 0)})
							}
						}
					})
				})
				if err != nil || f.Match == nil || f.Match.ID != target.ID {
					t.Fatalf("Find = %+v (match %+v), %v; want %s", f, f.Match, err, target.ID)
				}
			})
		}
	}
}

// TestFindOverlapCoversReorder: refunds created in the same second have no
// stable order between queries; an entity that moves toward the head by
// fewer than overlap positions between two pages is still seen. Plain
// skip += count paging misses this one.
func TestFindOverlapCoversReorder(t *testing.T) {
	for _, moveBy := range []int{1, 5, overlap} {
		t.Run(fmt.Sprintf("target_moves_up_%d", moveBy), func(t *testing.T) {
			const at = 100 // first entity of page 2 under plain paging
			_, target, f, err := findOn(t, refund, 230, at, func(fr *railtest.FakeRail) {
				fr.After(func(n int, fr *railtest.FakeRail) {
					if n == 1 {
						fr.Mutate(func(items []railtest.Listed) []railtest.Listed {
							e := items[at]
							items = slices.Delete(items, at, at+1)
							return slices.Insert(items, at-moveBy, e)
						})
					}
				})
			})
			if err != nil || f.Match == nil || f.Match.ID != target.ID {
				t.Fatalf("Find = %+v (match %+v), %v; want %s", f, f.Match, err, target.ID)
			}
		})
	}
}

func TestFindSkips(t *testing.T) {
	l, _, f, err := findOn(t, refund, 250, -1, nil)
	if err != nil || f.Match != nil || !f.Exhausted {
		t.Fatalf("Find = %+v, %v", f, err)
	}
	if got, want := l.seenSkips(), []int{0, 90, 180}; !slices.Equal(got, want) {
		t.Fatalf("skips = %v, want %v", got, want)
	}
	// Exactly a multiple of the page: the last full page is followed by a
	// short (here empty) one before absence is concluded.
	l, _, f, err = findOn(t, refund, 190, -1, nil)
	if err != nil || !f.Exhausted || f.Match != nil {
		t.Fatalf("Find = %+v, %v", f, err)
	}
	if got, want := l.seenSkips(), []int{0, 90, 180}; !slices.Equal(got, want) {
		t.Fatalf("skips = %v, want %v", got, want)
	}
}

// TestFindSkipIgnored: a rail that ignores skip returns the same full page
// forever; Find must fail, not loop or claim exhaustion.
func TestFindSkipIgnored(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		items := make([]string, 100)
		for i := range items {
			// One second each: a page of one second fails before paging does.
			items[i] = strings.Replace(refundJSON(fmt.Sprintf("rfnd_%d", i), "pay_1", 1, `[]`), "1597078866", strconv.Itoa(1597078866-i), 1)
		}
		_, _ = fmt.Fprintf(w, `{"entity":"collection","count":100,"items":[%s]}`, strings.Join(items, ","))
	}))
	defer srv.Close()
	f, err := New().Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), refund, stampA, time.Time{})
	if err == nil || f.Exhausted || f.Pages != 2 {
		t.Fatalf("Find = %+v, %v; want an error after the second page", f, err)
	}
}

func TestFindNeedsAccountNumber(t *testing.T) {
	a := payout
	a.Extra = nil
	if _, err := New().Find(context.Background(), nil, a, stampA, time.Time{}); err == nil {
		t.Fatal("Find listed payouts without an account number")
	}
}

// fuzzReadMembers are all the query members any Razorpay read admits.
var fuzzReadMembers = map[string]bool{
	"count": true, "skip": true, "from": true, "to": true,
	"account_number": true, "contact_id": true, "fund_account_id": true, "mode": true, "reference_id": true, "status": true,
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
	// Notes keys equal up to case, which Razorpay would echo as two.
	for _, notes := range []string{`{"ticket":"a","TICKET":"b"}`, `{"COUNTERSIGN_SIK":"x"}`, `{"k":"a","\u212a":"b"}`, `{"countersign_sik":"x","ticket":"a"}`} {
		add(post("/v1/payments/pay_1/refund", `{"amount":100,"notes":`+notes+`}`))
	}
	// Read queries (query.go): expand in its spellings, repeats, escapes.
	for _, path := range []string{
		"/v1/payments/pay_1?expand[]=card", "/v1/payments/pay_1?%65xpand%5B%5D=card",
		"/v1/refunds?count=1&c%6Funt=2", "/v1/payouts?account_number=1&account.number=2",
		"/v1/payouts?account_number=1&status=processed&mode=UPI&reference_id=a+b",
		"/v1/refunds?from=1&to=2&count=100&skip=0", "/v1/refunds?count=%zz", "/v1/refunds?x=%00%0d%0a",
	} {
		add(getReq(path))
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
		if err == nil && p.Kind == rail.KindRead {
			// An admitted read's query, as PHP would read it: each member
			// a listed one, once, never expand (query.go).
			_, query, _ := strings.Cut(path, "?")
			q, qerr := url.ParseQuery(query)
			if qerr != nil {
				t.Fatalf("admitted read %q whose query does not parse: %v", path, qerr)
			}
			for name, vs := range q {
				if !fuzzReadMembers[name] || len(vs) != 1 || vs[0] == "" {
					t.Fatalf("admitted read %q with query member %q = %q", path, name, vs)
				}
			}
		}
		if err == nil && p.Kind == rail.KindAction {
			// Whatever was accepted must be plain JSON the rail reads the
			// same way: one object, no repeated key.
			if len(bytes.TrimSpace(body)) > 0 && !json.Valid(body) {
				t.Fatalf("accepted invalid JSON %q", body)
			}
			// The notes Razorpay echoes, with the stamp, read one way: no
			// two keys equal up to case.
			notes := map[string]string{sik.StampKey: stampA}
			for name := range p.Action.Labels {
				if k, ok := strings.CutPrefix(name, "notes."); ok {
					notes[k] = ""
				}
			}
			echoed, _ := json.Marshal(notes)
			if err := rail.CheckAnswerJSON(echoed); err != nil {
				t.Fatalf("accepted %q, whose notes echoed as %s are unreadable: %v", body, echoed, err)
			}
		}
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReadSource: a payout list names the business account it lists
// (account_number), which the engine holds to payout_account_numbers;
// no other read names one.
func TestReadSource(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/payouts?account_number=7878780080316316":                  "7878780080316316",
		"/v1/payouts?count=10&account_number=2323230041626905&skip=10": "2323230041626905",
		"/v1/payouts?account_number=78%37878%30080316316":              "7878780080316316",
		"/v1/refunds?count=10":                                         "",
		"/v1/payments/pay_1":                                           "",
		"/v1/payouts/pout_1":                                           "",
	} {
		p, err := New().Parse(getReq(path))
		if err != nil || p.Kind != rail.KindRead || p.ReadSource != want {
			t.Errorf("%s: %+v, %v; want a read of source %q", path, p, err, want)
		}
	}
}
