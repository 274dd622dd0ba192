package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/outbox"
)

func toWebhook(w ledger.Webhook) *countersignv1.Webhook {
	return &countersignv1.Webhook{WebhookId: w.ID, Url: w.URL, EventTypes: w.EventTypes, Description: w.Description,
		CreateTime: timestamppb.New(w.CreatedAt)}
}

// CreateWebhook registers an owner webhook. Its signing secret is in this
// answer only. An owner has at most ledger.MaxWebhooksPerOwner webhooks.
func (s *OwnerServer) CreateWebhook(ctx context.Context, req *countersignv1.CreateWebhookRequest) (*countersignv1.CreateWebhookResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	w := req.GetWebhook()
	if err := s.webhooks.CheckURL(w.GetUrl()); err != nil {
		return nil, withDetails(status.New(codes.InvalidArgument, err.Error()), "WEBHOOK_ADDRESS_REFUSED")
	}
	secret, err := outbox.NewSecret()
	if err != nil {
		return nil, ToStatus(err)
	}
	hook, err := s.store.CreateWebhook(ctx, owner, ledger.WebhookSpec{URL: w.GetUrl(), Secret: ledger.WebhookSecret(secret),
		EventTypes: w.GetEventTypes(), Description: w.GetDescription()})
	if errors.Is(err, ledger.ErrWebhookLimit) {
		// A bound on what the owner holds, not a rate: waiting does not
		// help, deleting a webhook does.
		return nil, withDetails(status.New(codes.ResourceExhausted, fmt.Sprintf(
			"an owner may have at most %d webhooks; delete one before creating another", ledger.MaxWebhooksPerOwner)), "WEBHOOK_LIMIT_REACHED")
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.CreateWebhookResponse{Webhook: toWebhook(hook), SigningSecret: secret}, nil
}

// ListWebhooks pages through the owner's webhooks.
func (s *OwnerServer) ListWebhooks(ctx context.Context, req *countersignv1.ListWebhooksRequest) (*countersignv1.ListWebhooksResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	hooks, next, err := s.store.ListWebhooks(ctx, owner, int(req.GetPageSize()), req.GetPageToken())
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListWebhooksResponse{NextPageToken: next}
	for _, h := range hooks {
		out.Webhooks = append(out.Webhooks, toWebhook(h))
	}
	return out, nil
}

// DeleteWebhook deletes one of the owner's webhooks.
func (s *OwnerServer) DeleteWebhook(ctx context.Context, req *countersignv1.DeleteWebhookRequest) (*countersignv1.DeleteWebhookResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.DeleteWebhook(ctx, owner, req.GetWebhookId()); err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.DeleteWebhookResponse{}, nil
}

var deadStates = map[ledger.DeadLetterState]countersignv1.DeadLetterState{
	ledger.DeadLetterDead: countersignv1.DeadLetterState_DEAD_LETTER_STATE_DEAD, ledger.DeadLetterReplayed: countersignv1.DeadLetterState_DEAD_LETTER_STATE_REPLAYED,
}

func toDeadLetter(d ledger.DeadLetter) *countersignv1.DeadLetter {
	out := &countersignv1.DeadLetter{DeadLetterId: d.ID(), State: deadStates[d.State], WebhookId: d.WebhookID,
		EventId: strconv.FormatInt(d.OutboxID, 10), EventType: d.EventType, Attempts: int32(d.Attempts),
		LastHttpStatus: int32(d.LastStatus), LastError: d.LastError, CreateTime: timestamppb.New(d.CreatedAt), DeadTime: timestamppb.New(d.DeadAt)}
	if d.ReplayedAt != nil {
		out.ReplayTime = timestamppb.New(*d.ReplayedAt)
	}
	return out
}

// ListDeadLetters lists the owner's webhook deliveries that gave up.
func (s *OwnerServer) ListDeadLetters(ctx context.Context, req *countersignv1.ListDeadLettersRequest) (*countersignv1.ListDeadLettersResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	q := ledger.DeadLetterQuery{PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), WebhookID: req.GetWebhookId()}
	for k, v := range deadStates {
		if v == req.GetState() {
			q.State = k
		}
	}
	ds, next, err := s.store.ListDeadLetters(ctx, owner, q)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListDeadLettersResponse{NextPageToken: next}
	for _, d := range ds {
		out.DeadLetters = append(out.DeadLetters, toDeadLetter(d))
	}
	return out, nil
}

// ReplayDeadLetter puts a dead delivery back for delivery.
func (s *OwnerServer) ReplayDeadLetter(ctx context.Context, req *countersignv1.ReplayDeadLetterRequest) (*countersignv1.ReplayDeadLetterResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	outboxID, webhookID, err := ledger.ParseDeliveryID(req.GetDeadLetterId())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d, err := s.store.ReplayDeadLetter(ctx, owner, outboxID, webhookID)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.ReplayDeadLetterResponse{DeadLetter: toDeadLetter(d)}, nil
}
