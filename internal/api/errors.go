package api

import (
	"context"
	"errors"

	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
)

// Domain is the ErrorInfo domain of every Countersign error.
const Domain = "countersign.v1"

// ToStatus is the one mapping from internal errors to gRPC status codes,
// each with an errdetails.ErrorInfo whose Reason REST clients also see.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var verr *protovalidate.ValidationError
	var exhausted *quota.ExhaustedError
	var notHeld *ledger.NotHeldError
	switch {
	case errors.As(err, &verr):
		st := status.New(codes.InvalidArgument, err.Error())
		br := &errdetails.BadRequest{}
		for _, v := range verr.Violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
				Field: protovalidate.FieldPathString(v.Proto.GetField()), Description: v.Proto.GetMessage(),
			})
		}
		return withDetails(st, "INVALID_ARGUMENT", br)
	case errors.Is(err, ledger.ErrNotFound):
		return withDetails(status.New(codes.NotFound, err.Error()), "NOT_FOUND")
	case errors.Is(err, ledger.ErrNotSealed):
		return withDetails(status.New(codes.FailedPrecondition, err.Error()), "AUDIT_NOT_SEALED")
	case errors.Is(err, ledger.ErrProofRange):
		return withDetails(status.New(codes.InvalidArgument, err.Error()), "INVALID_ARGUMENT")
	case errors.Is(err, ledger.ErrUnavailable):
		return withDetails(status.New(codes.Unavailable, "the ledger is unreachable"), "LEDGER_UNAVAILABLE")
	case errors.Is(err, ledger.ErrInvalidText):
		// The boundary refuses a NUL naming its field (ValidationInterceptor);
		// this is what a caller sees of anything else the database cannot
		// store as text.
		return withDetails(status.New(codes.InvalidArgument,
			"a text value in the request holds a character that cannot be stored (such as a NUL byte, U+0000)"), "INVALID_ARGUMENT")
	case errors.Is(err, ledger.ErrOutboxInvalid):
		return withDetails(status.New(codes.InvalidArgument, err.Error()), "INVALID_ARGUMENT")
	case errors.Is(err, ledger.ErrApprovalState):
		return withDetails(status.New(codes.FailedPrecondition, err.Error()), "APPROVAL_NOT_PENDING")
	case errors.Is(err, ledger.ErrNotResolvable):
		return withDetails(status.New(codes.FailedPrecondition, err.Error()), "INTENT_NOT_RESOLVABLE")
	case errors.Is(err, ledger.ErrLeaseLost):
		return withDetails(status.New(codes.Aborted, err.Error()), "LEASE_LOST")
	case errors.Is(err, ledger.ErrCommitRefused):
		return withDetails(status.New(codes.PermissionDenied, err.Error()), "COMMIT_REFUSED")
	case errors.Is(err, engine.ErrUnauthenticated):
		return withDetails(status.New(codes.Unauthenticated, err.Error()), "UNAUTHENTICATED")
	case errors.Is(err, engine.ErrUnknownAccount):
		return withDetails(status.New(codes.FailedPrecondition, err.Error()), "UNKNOWN_RAIL_ACCOUNT")
	case errors.Is(err, ownerauth.ErrAgentCredential):
		return withDetails(status.New(codes.Unauthenticated, "an agent credential cannot call the owner API"), "AGENT_CREDENTIAL_REFUSED")
	case errors.Is(err, ownerauth.ErrNotAllowed):
		return withDetails(status.New(codes.PermissionDenied, err.Error()), "OWNER_NOT_ALLOWED")
	case errors.As(err, &notHeld):
		// One message for an account that exists and one that does not:
		// an owner learns nothing about accounts it does not hold.
		return withDetails(status.New(codes.PermissionDenied, notHeld.Error()), "RAIL_ACCOUNT_NOT_HELD")
	case errors.Is(err, ownerauth.ErrUnauthenticated):
		return withDetails(status.New(codes.Unauthenticated, err.Error()), "UNAUTHENTICATED")
	case errors.As(err, &exhausted):
		return withDetails(status.New(codes.ResourceExhausted, exhausted.Error()), "RATE_LIMITED",
			&errdetails.RetryInfo{RetryDelay: durationpb.New(exhausted.RetryAfter)})
	case errors.Is(err, context.Canceled):
		return withDetails(status.New(codes.Canceled, "request cancelled"), "CANCELLED")
	case errors.Is(err, context.DeadlineExceeded):
		return withDetails(status.New(codes.DeadlineExceeded, "deadline exceeded"), "DEADLINE_EXCEEDED")
	}
	return withDetails(status.New(codes.Internal, "internal error"), "INTERNAL")
}

func withDetails(st *status.Status, reason string, more ...proto.Message) error {
	details := []protoadapt.MessageV1{protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: reason, Domain: Domain})}
	for _, m := range more {
		details = append(details, protoadapt.MessageV1Of(m))
	}
	if with, err := st.WithDetails(details...); err == nil {
		return with.Err()
	}
	return st.Err()
}

// ValidationInterceptor validates every request message against its
// protovalidate rules, and refuses a NUL byte in any of its strings, before
// the handler runs.
func ValidationInterceptor(v protovalidate.Validator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if m, ok := req.(proto.Message); ok {
			if err := validate(v, m); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// validate checks one request: its protovalidate rules, then that no
// string in it holds a NUL byte (the ledger cannot store one, and the
// caller should learn which field holds it).
func validate(v protovalidate.Validator, m proto.Message) error {
	if err := v.Validate(m); err != nil {
		return ToStatus(err)
	}
	if path := nulField(m.ProtoReflect()); path != "" {
		return refuseNUL(path)
	}
	return nil
}

// StreamValidationInterceptor validates the first message of server
// streams (the request).
func StreamValidationInterceptor(v protovalidate.Validator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, v: v})
	}
}

type validatingStream struct {
	grpc.ServerStream
	v protovalidate.Validator
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		if err := validate(s.v, pm); err != nil {
			return err
		}
	}
	return nil
}
