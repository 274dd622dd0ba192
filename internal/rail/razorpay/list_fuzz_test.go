package razorpay

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
)

// bytesClient answers every request with status 200 and body.
type bytesClient struct{ body []byte }

func (c bytesClient) Do(context.Context, string, string, map[string]string, []byte) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(c.body))}, nil
}

// FuzzListPage: the streaming reader of a Razorpay list answer (whose
// entities carry notes the agent wrote) never panics, and what it accepts
// is a collection of at most pageCount entities of the kind asked for,
// each read as entity reads it alone, the stamped one among them.
func FuzzListPage(f *testing.F) {
	for _, s := range []string{
		`{"entity":"collection","count":0,"items":[]}`,
		`{"entity":"collection","items":[{"id":"rfnd_1","entity":"refund","amount":100,"currency":"INR","created_at":1760000000,"notes":{"countersign_sik":"S"}}]}`,
		`{"entity":"collection","items":[{"id":"rfnd_1","entity":"refund","amount":100,"created_at":1}],"entity":"collection"}`,
		`{"items":[]}`,
		`{"entity":"collection","items":[]} {}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rows, match, err := listPage(context.Background(), bytesClient{body}, "/v1/payments/pay_1/refunds", "refund", "S")
		if err != nil {
			if rows != nil || match != nil {
				t.Fatalf("an error with a result: %v", err)
			}
			return
		}
		if len(rows) > pageCount {
			t.Fatalf("%d rows, more than %d", len(rows), pageCount)
		}
		if match != nil {
			if match.Stamp != "S" {
				t.Fatalf("match with stamp %q", match.Stamp)
			}
			e, err := entity(match.Raw, "refund")
			if err != nil || e.ID != match.ID {
				t.Fatalf("the match does not read alone as the entity: %v", err)
			}
		}
	})
}
