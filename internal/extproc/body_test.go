package extproc

import (
	"encoding/json"
	"errors"
	"net/url"
	"testing"
)

func TestStampBody(t *testing.T) {
	cases := []struct {
		name, body, field, value string
		check                    func(t *testing.T, out []byte)
		wantErr                  bool
	}{
		{name: "stripe form adds metadata", body: "payment_intent=pi_1&amount=500", field: "metadata[countersign_sik]", value: "STAMP",
			check: func(t *testing.T, out []byte) {
				v, err := url.ParseQuery(string(out))
				if err != nil || v.Get("metadata[countersign_sik]") != "STAMP" || v.Get("amount") != "500" || v.Get("payment_intent") != "pi_1" {
					t.Fatalf("form = %s (%v)", out, err)
				}
			}},
		{name: "stripe form overwrites the caller's stamp", body: "metadata%5Bcountersign_sik%5D=FORGED&amount=1", field: "metadata[countersign_sik]", value: "STAMP",
			check: func(t *testing.T, out []byte) {
				v, _ := url.ParseQuery(string(out))
				if got := v["metadata[countersign_sik]"]; len(got) != 1 || got[0] != "STAMP" {
					t.Fatalf("stamp values = %v", got)
				}
			}},
		{name: "razorpay json adds notes", body: `{"amount":500,"notes":{"order":"o_1"}}`, field: "notes.countersign_sik", value: "STAMP",
			check: func(t *testing.T, out []byte) {
				var m struct {
					Amount json.Number       `json:"amount"`
					Notes  map[string]string `json:"notes"`
				}
				if err := json.Unmarshal(out, &m); err != nil || m.Notes["countersign_sik"] != "STAMP" || m.Notes["order"] != "o_1" || m.Amount != "500" {
					t.Fatalf("json = %s (%v)", out, err)
				}
			}},
		{name: "razorpay empty body is a full refund", body: "", field: "notes.countersign_sik", value: "STAMP",
			check: func(t *testing.T, out []byte) {
				if string(out) != `{"notes":{"countersign_sik":"STAMP"}}` {
					t.Fatalf("json = %s", out)
				}
			}},
		{name: "large amounts keep their digits", body: `{"amount":9007199254740993}`, field: "notes.countersign_sik", value: "S",
			check: func(t *testing.T, out []byte) {
				if string(out) != `{"amount":9007199254740993,"notes":{"countersign_sik":"S"}}` {
					t.Fatalf("json = %s", out)
				}
			}},
		{name: "json whitespace alone is an empty body", body: " \n\t\r", field: "notes.countersign_sik", value: "S",
			check: func(t *testing.T, out []byte) {
				if string(out) != `{"notes":{"countersign_sik":"S"}}` {
					t.Fatalf("json = %s", out)
				}
			}},
		// A form feed is not JSON's space: the body is not JSON (the rail
		// would not read it as empty), so it is refused, not replaced.
		{name: "a form feed is not an empty body", body: "\f", field: "notes.countersign_sik", value: "S", wantErr: true},
		{name: "json array refused", body: `[1]`, field: "notes.countersign_sik", value: "S", wantErr: true},
		{name: "notes not an object", body: `{"notes":"x"}`, field: "notes.countersign_sik", value: "S", wantErr: true},
		{name: "bad form", body: "a=%zz", field: "metadata[countersign_sik]", value: "S", wantErr: true},
		{name: "mcp tool call gets its metadata argument", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_refund","arguments":{"payment_intent":"pi_1","amount":100}}}`,
			field: "params.arguments.metadata.countersign_sik", value: "S",
			check: func(t *testing.T, out []byte) {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Params struct {
						Arguments struct {
							Amount   json.Number       `json:"amount"`
							Metadata map[string]string `json:"metadata"`
						} `json:"arguments"`
					} `json:"params"`
				}
				if err := json.Unmarshal(out, &m); err != nil || string(m.ID) != "7" || m.Params.Arguments.Metadata["countersign_sik"] != "S" || m.Params.Arguments.Amount != "100" {
					t.Fatalf("json = %s (%v)", out, err)
				}
			}},
		{name: "empty path key", body: "{}", field: "a..b", value: "S", wantErr: true},
		{name: "unknown field shape", body: "", field: "plain", value: "S", wantErr: true},
		{name: "no field leaves the body", body: "x=1", field: "", value: "",
			check: func(t *testing.T, out []byte) {
				if string(out) != "x=1" {
					t.Fatalf("body = %s", out)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := StampBody([]byte(tc.body), tc.field, tc.value)
			if tc.wantErr {
				if !errors.Is(err, ErrBodyStamp) {
					t.Fatalf("err = %v, want ErrBodyStamp", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, out)
		})
	}
}

func FuzzStampBody(f *testing.F) {
	f.Add([]byte(`{"amount":1,"notes":{}}`), "notes.countersign_sik")
	f.Add([]byte("amount=1&metadata[x]=y"), "metadata[countersign_sik]")
	f.Fuzz(func(t *testing.T, body []byte, field string) {
		out, err := StampBody(body, field, "STAMP")
		if err != nil || field == "" {
			return
		}
		// A stamped body carries the stamp where the rail will keep it.
		if field == "notes.countersign_sik" {
			var m struct {
				Notes map[string]any `json:"notes"`
			}
			if json.Unmarshal(out, &m) != nil || m.Notes["countersign_sik"] != "STAMP" {
				t.Fatalf("stamped json %s lacks the stamp", out)
			}
		}
		if field == "metadata[countersign_sik]" {
			v, err := url.ParseQuery(string(out))
			if err != nil || v.Get(field) != "STAMP" {
				t.Fatalf("stamped form %s lacks the stamp", out)
			}
		}
	})
}
