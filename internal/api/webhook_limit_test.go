package api

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

// CreateWebhook refuses an owner's webhook beyond ledger.MaxWebhooksPerOwner
// with ResourceExhausted, naming the cap; deleting one frees its place.
func TestCreateWebhookRefusesBeyondTheCap(t *testing.T) {
	s, _ := ownerServer(t)
	create := func(owner string, i int) (*countersignv1.CreateWebhookResponse, error) {
		return s.CreateWebhook(as(owner), &countersignv1.CreateWebhookRequest{Webhook: &countersignv1.Webhook{
			Url: fmt.Sprintf("https://hooks.example.com/%d", i)}})
	}
	var first string
	for i := range ledger.MaxWebhooksPerOwner {
		w, err := create("own_w", i)
		if err != nil {
			t.Fatalf("webhook %d: %v", i, err)
		}
		if i == 0 {
			first = w.GetWebhook().GetWebhookId()
		}
	}
	_, err := create("own_w", 99)
	if code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), fmt.Sprint(ledger.MaxWebhooksPerOwner)) {
		t.Fatalf("webhook beyond the cap: %v, want ResourceExhausted naming %d", err, ledger.MaxWebhooksPerOwner)
	}
	if _, err := create("own_v", 0); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	if _, err := s.DeleteWebhook(as("own_w"), &countersignv1.DeleteWebhookRequest{WebhookId: first}); err != nil {
		t.Fatal(err)
	}
	if _, err := create("own_w", 100); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
