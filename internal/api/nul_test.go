package api

import (
	"context"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// The validation interceptor refuses a NUL byte in any string of a
// request, at any depth, naming the field; the handler never runs.
func TestValidationInterceptorRefusesNULNamingTheField(t *testing.T) {
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	const sik = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for _, tc := range []struct {
		name string
		req  proto.Message
		path string
	}{
		{"top-level string", &countersignv1.ListIntentsRequest{RailAccount: "acct\x00"}, "rail_account"},
		{"nested message", &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "bot\x00evil"}}, "agent.display_name"},
		{"nested message", &countersignv1.CreateMandateRequest{Mandate: &countersignv1.Mandate{Purpose: "refunds\x00"}}, "mandate.purpose"},
		{"repeated string", &countersignv1.CreateMandateRequest{Mandate: &countersignv1.Mandate{AllowedPayees: []string{"ba_1", "ba_2\x00"}}}, "mandate.allowed_payees[1]"},
		{"decision API", &countersignv1.DecisionServiceGetIntentRequest{RailAccount: "acct_1", Sik: sik[:31] + "\x00"}, "sik"},
		{"map value", &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_HttpRequest{HttpRequest: &countersignv1.HttpRequest{
			Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Headers: map[string]string{"x-a": "1\x00"}}}}, `http_request.headers["x-a"]`},
		{"map key", &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_HttpRequest{HttpRequest: &countersignv1.HttpRequest{
			Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Headers: map[string]string{"x-\x00": "1"}}}}, `http_request.headers["x-\x00"]`},
	} {
		t.Run(tc.name+" "+tc.path, func(t *testing.T) {
			ran := false
			_, err := ValidationInterceptor(v)(context.Background(), tc.req, &grpc.UnaryServerInfo{},
				func(context.Context, any) (any, error) { ran = true; return nil, nil })
			if ran || status.Code(err) != codes.InvalidArgument {
				t.Fatalf("handler ran: %v, err %v; want InvalidArgument before the handler", ran, err)
			}
			if got := nulField(tc.req.ProtoReflect()); got != tc.path {
				t.Fatalf("NUL found at %q, want %q", got, tc.path)
			}
			// A protovalidate rule may refuse the field first; either way
			// the answer names it.
			named := false
			for _, d := range status.Convert(err).Details() {
				if b, ok := d.(*errdetails.BadRequest); ok {
					for _, fv := range b.GetFieldViolations() {
						named = named || fv.GetField() == tc.path
					}
				}
			}
			if !named {
				t.Fatalf("error %v names no field violation at %s", err, tc.path)
			}
		})
	}
	// Strings without NUL, and bytes with it, pass.
	ok := &countersignv1.ListIntentsRequest{RailAccount: "acct_1"}
	if _, err := ValidationInterceptor(v)(context.Background(), ok, &grpc.UnaryServerInfo{},
		func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatalf("a clean request: %v", err)
	}
	if p := nulField((&countersignv1.HttpRequest{Body: []byte("a\x00b")}).ProtoReflect()); p != "" {
		t.Fatalf("bytes with a NUL refused at %s; only text is", p)
	}
}

// A watch stream's request is checked the same way.
func TestStreamValidationInterceptorRefusesNUL(t *testing.T) {
	v, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	ss := &fakeRecvStream{msg: &countersignv1.WatchIntentsRequest{RailAccount: "acct\x00"}}
	err = StreamValidationInterceptor(v)(nil, ss, &grpc.StreamServerInfo{}, func(_ any, s grpc.ServerStream) error {
		return s.RecvMsg(&countersignv1.WatchIntentsRequest{})
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("WatchIntents with a NUL: %v, want InvalidArgument", err)
	}
}

type fakeRecvStream struct {
	grpc.ServerStream
	msg proto.Message
}

func (f *fakeRecvStream) RecvMsg(m any) error {
	proto.Merge(m.(proto.Message), f.msg)
	return nil
}

// Text the ledger cannot store that reaches it anyway (a caller without
// the interceptor) is InvalidArgument with a clear message, not Internal.
func TestLedgerInvalidTextIsInvalidArgument(t *testing.T) {
	s, _ := ownerServer(t)
	_, err := s.CreateAgent(as("own_n"), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "bot\x00evil"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "NUL") {
		t.Fatalf("CreateAgent with a NUL past the interceptor: %v, want InvalidArgument naming NUL", err)
	}
	if _, err := s.ListIntents(as("own_n"), &countersignv1.ListIntentsRequest{RailAccount: "acct\x00"}); err != nil && status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListIntents with a NUL past the interceptor: %v, want InvalidArgument or nothing", err)
	}
}
