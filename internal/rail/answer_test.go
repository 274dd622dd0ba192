package rail

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAnswerEncoding(t *testing.T) {
	for _, tc := range []struct {
		headers map[string]string
		encoded bool
	}{
		{nil, false},
		{map[string]string{"content-type": "application/json"}, false},
		{map[string]string{"content-encoding": "identity"}, false},
		{map[string]string{"Content-Encoding": " IDENTITY "}, false},
		{map[string]string{"content-encoding": ""}, false},
		{map[string]string{"content-encoding": "gzip"}, true},
		{map[string]string{"Content-Encoding": "br"}, true},
		{map[string]string{"content-encoding": "identity, gzip"}, true},
		{map[string]string{"content-encoding": "x-gzip"}, true},
	} {
		if err := AnswerEncoding(tc.headers); (err != nil) != tc.encoded {
			t.Errorf("AnswerEncoding(%v) = %v, want encoded %v", tc.headers, err, tc.encoded)
		}
	}
}

func TestCheckAnswerJSON(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
		says string // a word the refusal must carry
	}{
		{`{"a":1,"b":{"c":[{"d":1},{"d":2}]}}`, true, ""},
		{` {"a":1} `, true, ""},
		{`{"a":{"x":1},"b":{"x":2}}`, true, ""}, // one name in two objects
		{`{"a":1,"a":2}`, false, "twice"},
		{`{"amount":5000,"AMOUNT":100}`, false, "ignore case"},
		{`{"o":{"k":1,"K":2}}`, false, "ignore case"}, // K is the Kelvin sign, K to encoding/json
		{`{"o":[{"s":1,"ſ":2}]}`, false, "ignore case"},
		{`[{"a":1}]`, false, "not a JSON object"},
		{`"x"`, false, "not a JSON object"},
		{``, false, "truncated"},
		{`{"a":1`, false, "truncated"},
		{`{"a":1}{}`, false, "after"},
		{`{"a":"\ud800"}`, false, "surrogate"},
		{"{\"a\":\"\xff\"}", false, "UTF-8"},
		{strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), false, "deeper"},
		{strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64), true, ""},
	} {
		err := CheckAnswerJSON([]byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("CheckAnswerJSON(%.60q) = %v, want ok %v", tc.body, err, tc.ok)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), tc.says) {
			t.Errorf("CheckAnswerJSON(%.60q) = %v, want it to say %q", tc.body, err, tc.says)
		}
	}
}

type selfDecoding struct{ raw string }

func (s *selfDecoding) UnmarshalJSON(b []byte) error { s.raw = string(b); return nil }

func TestDecodeAnswerNamesMembersExactly(t *testing.T) {
	type inner struct {
		ID string `json:"id"`
	}
	type answer struct {
		Amount *int64            `json:"amount"`
		Inner  *inner            `json:"inner"`
		List   []inner           `json:"list"`
		ByKey  map[string]inner  `json:"by_key"`
		Self   selfDecoding      `json:"self"`
		Raw    json.RawMessage   `json:"raw"`
		Plain  string            // matched by its Go name
		Skip   string            `json:"-"`
		Extra  map[string]string `json:"extra"`
	}
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"amount":1,"inner":{"id":"x"},"list":[{"id":"y"}],"by_key":{"k":{"id":"z"}},"Plain":"p"}`, true},
		{`{"unknown":1,"UNKNOWN_TOO":2}`, true},
		{`{"self":{"ID":1,"Id":2},"raw":{"AMOUNT":1}}`, false},           // still refused by CheckAnswerJSON
		{`{"self":{"ID":1},"raw":{"AMOUNT":1},"extra":{"A":"b"}}`, true}, // decoded by themselves, or a map
		{`{"Amount":1}`, false},
		{`{"inner":{"ID":"x"}}`, false},
		{`{"list":[{"id":"y"},{"Id":"z"}]}`, false},
		{`{"by_key":{"k":{"iD":"z"}}}`, false},
		{`{"plain":"p"}`, false},
		{`{"SKIP":"s"}`, true}, // json:"-": never read
	} {
		var a answer
		if err := DecodeAnswer([]byte(tc.body), &a); (err == nil) != tc.ok {
			t.Errorf("DecodeAnswer(%s) = %v, want ok %v", tc.body, err, tc.ok)
		}
	}
}

// FuzzCheckAnswerJSON: what CheckAnswerJSON accepts is one JSON object
// that encoding/json reads, in which no two names of an object are
// equal up to case.
func FuzzCheckAnswerJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"A":2}`, `{"a":{"b":[1,{"c":2}]}}`, `{"a":"\ud800\udc00"}`, `[]`, `{"k":1,"K":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if CheckAnswerJSON(body) != nil {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		var walk func(any)
		walk = func(x any) {
			switch x := x.(type) {
			case map[string]any:
				seen := map[string]string{}
				for k, e := range x {
					if prev, dup := seen[foldName(k)]; dup {
						t.Fatalf("accepted %q, with %q and %q in one object", body, prev, k)
					}
					seen[foldName(k)] = k
					walk(e)
				}
			case []any:
				for _, e := range x {
					walk(e)
				}
			}
		}
		walk(v)
	})
}
