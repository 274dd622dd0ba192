package ledger

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
)

// The event types the outbox writes (migration 00005, countersign_intent_outbox;
// 00047, countersign_approval_outbox).
const (
	EventApprovalOpened            = "approval.opened"
	EventIntentHeld                = "intent.held"
	EventIntentApplied             = "intent.applied"
	EventIntentQuarantined         = "intent.quarantined"
	EventIntentBlocked             = "intent.blocked"
	EventIntentConfirmedNotApplied = "intent.confirmed_not_applied"
	EventIntentFailed              = "intent.failed"
)

// EventTypes lists every event type a webhook may subscribe to.
func EventTypes() []string {
	return []string{EventApprovalOpened, EventIntentHeld, EventIntentApplied, EventIntentQuarantined, EventIntentBlocked,
		EventIntentConfirmedNotApplied, EventIntentFailed}
}

var (
	// ErrOutboxInvalid means a webhook, page token or delivery id given to
	// the outbox is malformed; the API boundary maps it to InvalidArgument.
	ErrOutboxInvalid = errors.New("ledger: invalid outbox request")
	// ErrDeliveryLeaseLost means the dispatcher no longer holds the
	// delivery's lease (it expired, or another dispatcher took it over):
	// its result is not recorded and the delivery will be sent again.
	ErrDeliveryLeaseLost = errors.New("ledger: delivery lease lost")
	// ErrWebhookLimit means the owner already has MaxWebhooksPerOwner live
	// webhooks; the API boundary maps it to ResourceExhausted.
	ErrWebhookLimit = errors.New("ledger: webhook limit reached")
)

// MaxWebhooksPerOwner bounds an owner's live webhooks. One dispatcher
// serves every owner of a deployment, and each event fans out to every
// webhook of its owner: without a bound, one owner's fan-out to slow
// endpoints would hold the deliveries of every other owner back.
const MaxWebhooksPerOwner = 10

// OpWebhookCreate names CreateWebhook's transaction to a TxObserver.
const OpWebhookCreate = "webhook_create"

// WebhookSecret is a webhook's signing secret. It prints as [redacted] so
// that it never reaches a log by accident.
type WebhookSecret string

// String keeps the secret out of fmt's %v and %s.
func (WebhookSecret) String() string { return "[redacted]" }

// GoString keeps the secret out of fmt's %#v.
func (WebhookSecret) GoString() string { return "[redacted]" }

// LogValue keeps the secret out of slog output.
func (WebhookSecret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Webhook is an owner's endpoint, without its secret: after CreateWebhook
// the secret is only ever read by the dispatcher, inside a Delivery.
type Webhook struct {
	ID          string
	OwnerID     string
	URL         string
	EventTypes  []string // empty means every type
	Description string
	CreatedAt   time.Time
}

// WebhookSpec is a webhook to create. Secret signs its deliveries; the
// caller generates it (16–256 bytes) and shows it to the owner once.
type WebhookSpec struct {
	URL         string
	Secret      WebhookSecret
	EventTypes  []string
	Description string
}

func (w WebhookSpec) validate() error {
	u, err := url.Parse(w.URL)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(w.URL) > 2048 ||
		strings.ContainsAny(w.URL, " \t\r\n"):
		return fmt.Errorf("%w: webhook url must be an absolute http(s) URL of at most 2048 bytes", ErrOutboxInvalid)
	case len(w.Secret) < 16 || len(w.Secret) > 256:
		return fmt.Errorf("%w: webhook secret must be 16 to 256 bytes", ErrOutboxInvalid)
	case len(w.EventTypes) > 64:
		return fmt.Errorf("%w: at most 64 event types", ErrOutboxInvalid)
	case len(w.Description) > 1000:
		return fmt.Errorf("%w: description longer than 1000 bytes", ErrOutboxInvalid)
	}
	known := EventTypes()
	for i, t := range w.EventTypes {
		if !slices.Contains(known, t) {
			return fmt.Errorf("%w: unknown event type %q (known: %s)", ErrOutboxInvalid, t, strings.Join(known, ", "))
		}
		if slices.Contains(w.EventTypes[:i], t) {
			return fmt.Errorf("%w: event type %q listed twice", ErrOutboxInvalid, t)
		}
	}
	return nil
}

const webhookColumns = `id, owner_id, url, event_types, description, created_at`

func scanWebhook(row pgx.Row) (Webhook, error) {
	var w Webhook
	err := row.Scan(&w.ID, &w.OwnerID, &w.URL, &w.EventTypes, &w.Description, &w.CreatedAt)
	return w, err
}

// lockOwnerWebhooksSQL serialises the creation of one owner's webhooks (a
// transaction-scoped advisory lock), so that concurrent creates cannot
// each count fewer than MaxWebhooksPerOwner and together exceed it.
const lockOwnerWebhooksSQL = `SELECT pg_advisory_xact_lock(hashtextextended('countersign.webhooks/' || $1, 0))`

// CreateWebhook registers an endpoint for ownerID. Events written from now
// on whose type it subscribes to are delivered to it; older ones are not.
// An owner has at most MaxWebhooksPerOwner live webhooks: one more is
// ErrWebhookLimit (deleting one frees its place).
func (s *Store) CreateWebhook(ctx context.Context, ownerID string, spec WebhookSpec) (Webhook, error) {
	if err := spec.validate(); err != nil {
		return Webhook{}, err
	}
	id, err := credential.NewID("whk")
	if err != nil {
		return Webhook{}, err
	}
	types := spec.EventTypes
	if types == nil {
		types = []string{}
	}
	var w Webhook
	err = s.inTx(ctx, OpWebhookCreate, func(tx *Tx) error {
		if _, err := tx.tx.Exec(ctx, lockOwnerWebhooksSQL, ownerID); err != nil {
			return err
		}
		var live int
		if err := tx.tx.QueryRow(ctx, `SELECT count(*) FROM webhooks WHERE owner_id = $1 AND deleted_at IS NULL`, ownerID).Scan(&live); err != nil {
			return err
		}
		if live >= MaxWebhooksPerOwner {
			return fmt.Errorf("%w: this owner already has %d webhooks, the most allowed; delete one before creating another",
				ErrWebhookLimit, live)
		}
		var err error
		w, err = scanWebhook(tx.tx.QueryRow(ctx, `
			INSERT INTO webhooks (id, owner_id, url, secret, event_types, description)
			VALUES ($1, $2, $3, $4, $5, $6)
			RETURNING `+webhookColumns, id, ownerID, spec.URL, string(spec.Secret), types, spec.Description))
		return err
	})
	if errors.Is(err, ErrWebhookLimit) {
		return Webhook{}, err
	}
	if err != nil {
		return Webhook{}, classify(fmt.Errorf("ledger: create webhook: %w", err))
	}
	return w, nil
}

// ListWebhooks pages through an owner's live webhooks, oldest first.
// pageSize 0 means 50 (at most 1000); next is "" on the last page.
func (s *Store) ListWebhooks(ctx context.Context, ownerID string, pageSize int, pageToken string) (_ []Webhook, next string, _ error) {
	size, err := outboxPageSize(pageSize)
	if err != nil {
		return nil, "", err
	}
	var afterAt *time.Time
	afterID := ""
	if pageToken != "" {
		at, id, err := decodeOutboxToken(pageToken)
		if err != nil {
			return nil, "", err
		}
		micros, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("%w: page token", ErrOutboxInvalid)
		}
		t := time.UnixMicro(micros)
		afterAt, afterID = &t, id
	}
	rows, err := s.pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks
		WHERE owner_id = $1 AND deleted_at IS NULL
		  AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3))
		ORDER BY created_at, id LIMIT $4`, ownerID, afterAt, afterID, size+1)
	if err != nil {
		return nil, "", classify(fmt.Errorf("ledger: list webhooks: %w", err))
	}
	ws, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Webhook, error) { return scanWebhook(r) })
	if err != nil {
		return nil, "", classify(fmt.Errorf("ledger: list webhooks: %w", err))
	}
	if len(ws) > size {
		ws = ws[:size]
		last := ws[size-1]
		next = encodeOutboxToken(strconv.FormatInt(last.CreatedAt.UnixMicro(), 10), last.ID)
	}
	return ws, next, nil
}

// DeleteWebhook deletes one of ownerID's webhooks, for good. Its pending
// deliveries and dead letters are dropped in the same transaction; a
// dispatcher already sending one may still deliver it once.
func (s *Store) DeleteWebhook(ctx context.Context, ownerID, id string) error {
	err := s.inTx(ctx, OpWebhookDelete, func(tx *Tx) error {
		tag, err := tx.tx.Exec(ctx, `UPDATE webhooks SET deleted_at = now()
			WHERE id = $1 AND owner_id = $2 AND deleted_at IS NULL`, id, ownerID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: webhook %s", ErrNotFound, id)
		}
		_, err = tx.tx.Exec(ctx, `UPDATE outbox_deliveries
			SET state = 'dropped', lease_owner = NULL, lease_expires_at = NULL
			WHERE webhook_id = $1 AND state IN ('pending', 'dead')`, id)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return classify(fmt.Errorf("ledger: delete webhook: %w", err))
	}
	return err
}

// DeliveryID is the stable id of one event's delivery to one webhook,
// "<outbox_id>-<webhook_id>": the same on every attempt, so receivers can
// de-duplicate, and the id of its dead letter.
func DeliveryID(outboxID int64, webhookID string) string {
	return strconv.FormatInt(outboxID, 10) + "-" + webhookID
}

// ParseDeliveryID splits a DeliveryID (or dead letter id).
func ParseDeliveryID(id string) (outboxID int64, webhookID string, err error) {
	n, w, ok := strings.Cut(id, "-")
	if ok {
		outboxID, err = strconv.ParseInt(n, 10, 64)
	}
	if !ok || err != nil || outboxID <= 0 || !strings.HasPrefix(w, "whk_") {
		return 0, "", fmt.Errorf("%w: delivery id %q is not <outbox_id>-<webhook_id>", ErrOutboxInvalid, id)
	}
	return outboxID, w, nil
}

// Delivery is one event claimed for delivery to one webhook.
type Delivery struct {
	OutboxID  int64
	WebhookID string
	OwnerID   string
	EventType string
	// Payload is the event's JSON, byte for byte the same on every attempt.
	Payload []byte
	URL     string
	Secret  WebhookSecret
	// Attempt is this attempt's number since the delivery was created or
	// last replayed (1 for the first).
	Attempt int
	// Lease is the fencing token of this claim; LeaseExpiresAt its end.
	Lease          int64
	LeaseExpiresAt time.Time
	// EventAt is when the event was written.
	EventAt time.Time
}

// ID is the delivery's stable id.
func (d Delivery) ID() string { return DeliveryID(d.OutboxID, d.WebhookID) }

// ClaimDeliveries leases up to limit pending deliveries that are due and
// not leased (or whose lease expired: their dispatcher died) to owner for
// ttl, counting the attempt. Concurrent dispatchers never claim the same
// delivery (FOR UPDATE SKIP LOCKED). A due delivery to a webhook deleted
// since it was written is dropped here instead.
//
// The batch is shared fairly among the owners of the webhooks: it takes
// each owner's oldest due delivery, then each owner's second, and so on
// (oldest first within a round), so one owner's backlog, however large,
// cannot keep another owner's events waiting behind it; an owner alone
// still fills the batch. The candidates are the oldest due deliveries
// overall and, for each live webhook, its own oldest due ones (so the
// claim reads at most limit rows per live webhook, and each owner has at
// most MaxWebhooksPerOwner). A webhook's own candidates come from its due
// pending deliveries only, in the order they fall due (index
// outbox_deliveries_webhook_due, migration 00040): its dead letters and
// the deliveries still backing off take no place among them, however many
// there are. Only the deliveries leased right now (at most what the
// dispatchers have in flight) are read and passed over.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, ttl time.Duration, limit int) ([]Delivery, error) {
	return s.ClaimDeliveriesCapped(ctx, owner, ttl, limit, OwnerCap{})
}

// OwnerCap bounds how many of one owner's deliveries a dispatcher holds at
// once, so that an owner whose webhooks answer slowly (or never) fills
// only its own share of the dispatcher's slots.
type OwnerCap struct {
	// Max is the most deliveries of one owner the dispatcher may hold,
	// those it holds already included; 0 means no cap.
	Max int
	// Held is how many of each owner's deliveries it holds already.
	Held map[string]int
}

// ClaimDeliveriesCapped is ClaimDeliveries taking no more of an owner's
// deliveries than oc leaves room for. An owner's turns in the shared batch
// begin after those of its deliveries the dispatcher holds already, so the
// owners it holds fewer deliveries of go first.
func (s *Store) ClaimDeliveriesCapped(ctx context.Context, owner string, ttl time.Duration, limit int, oc OwnerCap) ([]Delivery, error) {
	if owner == "" || ttl <= 0 || limit <= 0 || oc.Max < 0 {
		return nil, fmt.Errorf("%w: claim needs an owner, a positive lease, a positive limit and a cap of 0 or more", ErrOutboxInvalid)
	}
	heldOwners := make([]string, 0, len(oc.Held))
	heldCounts := make([]int64, 0, len(oc.Held))
	for o, n := range oc.Held {
		if n > 0 {
			heldOwners, heldCounts = append(heldOwners, o), append(heldCounts, int64(n))
		}
	}
	rows, err := s.pool.Query(ctx, `
		WITH candidates AS (
			(SELECT d.outbox_id, d.webhook_id, d.next_attempt_at
			FROM outbox_deliveries d
			WHERE d.state = 'pending' AND d.next_attempt_at <= now()
			  AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
			ORDER BY d.next_attempt_at, d.outbox_id
			LIMIT $1)
			UNION
			(SELECT c.outbox_id, c.webhook_id, c.next_attempt_at
			FROM webhooks w CROSS JOIN LATERAL (
				SELECT d.outbox_id, d.webhook_id, d.next_attempt_at
				FROM outbox_deliveries d
				WHERE d.webhook_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= now()
				  AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
				ORDER BY d.next_attempt_at, d.outbox_id
				LIMIT $1) c
			WHERE w.deleted_at IS NULL)
		), turns AS (
			SELECT c.outbox_id, c.webhook_id, c.next_attempt_at,
			       row_number() OVER (PARTITION BY w.owner_id ORDER BY c.next_attempt_at, c.outbox_id, c.webhook_id)
			         + COALESCE(h.held, 0) AS turn
			FROM candidates c JOIN webhooks w ON w.id = c.webhook_id
			LEFT JOIN unnest($4::text[], $5::bigint[]) AS h(owner_id, held) ON h.owner_id = w.owner_id
		), due AS (
			SELECT d.outbox_id, d.webhook_id, w.deleted_at IS NOT NULL AS gone
			FROM turns t
			JOIN outbox_deliveries d ON d.outbox_id = t.outbox_id AND d.webhook_id = t.webhook_id
			JOIN webhooks w ON w.id = d.webhook_id
			WHERE d.state = 'pending' AND d.next_attempt_at <= now()
			  AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
			  AND ($6::bigint = 0 OR t.turn <= $6::bigint)
			ORDER BY t.turn, t.next_attempt_at, t.outbox_id, t.webhook_id
			LIMIT $1
			FOR UPDATE OF d SKIP LOCKED
		)
		UPDATE outbox_deliveries d SET
			state            = CASE WHEN due.gone THEN 'dropped' ELSE 'pending' END,
			lease_owner      = CASE WHEN due.gone THEN NULL ELSE $2 END,
			lease_expires_at = CASE WHEN due.gone THEN NULL ELSE now() + $3::bigint * interval '1 microsecond' END,
			attempts         = CASE WHEN due.gone THEN d.attempts ELSE d.attempts + 1 END,
			claims           = CASE WHEN due.gone THEN d.claims ELSE d.claims + 1 END
		FROM due JOIN outbox o ON o.id = due.outbox_id JOIN webhooks w ON w.id = due.webhook_id
		WHERE d.outbox_id = due.outbox_id AND d.webhook_id = due.webhook_id
		RETURNING due.gone, d.outbox_id, d.webhook_id, o.owner_id, o.event_type, o.payload, w.url, w.secret,
		          d.attempts, d.claims, COALESCE(d.lease_expires_at, now()), o.created_at`,
		limit, owner, ttl.Microseconds(), heldOwners, heldCounts, int64(oc.Max))
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: claim deliveries: %w", err))
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		var gone bool
		var secret string
		if err := rows.Scan(&gone, &d.OutboxID, &d.WebhookID, &d.OwnerID, &d.EventType, &d.Payload, &d.URL, &secret,
			&d.Attempt, &d.Lease, &d.LeaseExpiresAt, &d.EventAt); err != nil {
			return nil, classify(fmt.Errorf("ledger: claim deliveries: %w", err))
		}
		if gone {
			continue
		}
		d.Secret = WebhookSecret(secret)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("ledger: claim deliveries: %w", err))
	}
	slices.SortFunc(out, func(a, b Delivery) int {
		return cmp.Or(cmp.Compare(a.OutboxID, b.OutboxID), strings.Compare(a.WebhookID, b.WebhookID))
	})
	return out, nil
}

// MarkDelivered records that d's webhook acknowledged it. It returns
// ErrDeliveryLeaseLost unless owner still holds the very lease of d.
func (s *Store) MarkDelivered(ctx context.Context, d Delivery, owner string) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE outbox_deliveries SET state = 'delivered', delivered_at = now(), lease_owner = NULL, lease_expires_at = NULL
		WHERE outbox_id = $1 AND webhook_id = $2 AND state = 'pending'
		  AND lease_owner = $3 AND claims = $4 AND lease_expires_at > now()`,
		d.OutboxID, d.WebhookID, owner, d.Lease)
	return markResult(tag.RowsAffected(), err, d, "delivered")
}

// DeliveryFailure is the outcome of a failed attempt.
type DeliveryFailure struct {
	// Status is the HTTP status the webhook answered; 0 if none (timeout,
	// connection refused).
	Status int
	// Error says what went wrong, for the owner (no secrets in it).
	Error string
	// Retry is how long to wait before the next attempt, measured on the
	// database's clock so that dispatchers' clocks do not matter.
	Retry time.Duration
	// Dead makes the delivery a dead letter instead of retrying it.
	Dead bool
}

// MarkFailed records a failed attempt of d: it is retried after f.Retry, or
// becomes a dead letter when f.Dead. It returns ErrDeliveryLeaseLost
// unless owner still holds the very lease of d.
func (s *Store) MarkFailed(ctx context.Context, d Delivery, owner string, f DeliveryFailure) error {
	msg := strings.ToValidUTF8(f.Error, "?")
	if len(msg) > 1000 {
		msg = strings.ToValidUTF8(msg[:1000], "")
	}
	status := f.Status
	if status < 0 || status > 999 {
		status = 0
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE outbox_deliveries SET
			state = CASE WHEN $5 THEN 'dead' ELSE 'pending' END,
			dead_at = CASE WHEN $5 THEN now() ELSE dead_at END,
			next_attempt_at = now() + $6::bigint * interval '1 microsecond',
			last_status = $7, last_error = $8, lease_owner = NULL, lease_expires_at = NULL
		WHERE outbox_id = $1 AND webhook_id = $2 AND state = 'pending'
		  AND lease_owner = $3 AND claims = $4 AND lease_expires_at > now()`,
		d.OutboxID, d.WebhookID, owner, d.Lease, f.Dead, max(f.Retry, 0).Microseconds(), status, msg)
	return markResult(tag.RowsAffected(), err, d, "failed")
}

func markResult(n int64, err error, d Delivery, what string) error {
	if err != nil {
		return classify(fmt.Errorf("ledger: mark delivery %s %s: %w", d.ID(), what, err))
	}
	if n == 0 {
		return fmt.Errorf("%w: delivery %s (claim %d)", ErrDeliveryLeaseLost, d.ID(), d.Lease)
	}
	return nil
}

// DeliveryStatus is where one delivery stands.
type DeliveryStatus struct {
	OutboxID       int64
	WebhookID      string
	EventType      string
	State          string // pending, delivered, dead or dropped
	Attempts       int
	LeaseOwner     string
	LeaseExpiresAt *time.Time
	NextAttemptAt  time.Time
	LastStatus     int
	LastError      string
	DeliveredAt    *time.Time
}

// GetDelivery returns one of ownerID's deliveries.
func (s *Store) GetDelivery(ctx context.Context, ownerID string, outboxID int64, webhookID string) (DeliveryStatus, error) {
	var d DeliveryStatus
	err := s.pool.QueryRow(ctx, `
		SELECT d.outbox_id, d.webhook_id, o.event_type, d.state, d.attempts, COALESCE(d.lease_owner, ''),
		       d.lease_expires_at, d.next_attempt_at, d.last_status, d.last_error, d.delivered_at
		FROM outbox_deliveries d JOIN outbox o ON o.id = d.outbox_id JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.outbox_id = $1 AND d.webhook_id = $2 AND w.owner_id = $3`, outboxID, webhookID, ownerID).
		Scan(&d.OutboxID, &d.WebhookID, &d.EventType, &d.State, &d.Attempts, &d.LeaseOwner,
			&d.LeaseExpiresAt, &d.NextAttemptAt, &d.LastStatus, &d.LastError, &d.DeliveredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("%w: delivery %s", ErrNotFound, DeliveryID(outboxID, webhookID))
	}
	if err != nil {
		return d, classify(fmt.Errorf("ledger: get delivery: %w", err))
	}
	return d, nil
}

// Event is one outbox row.
type Event struct {
	ID          int64
	OwnerID     string
	Type        string
	RailAccount string
	SIK         string
	Payload     []byte
	CreatedAt   time.Time
}

// EventsOf lists the events written about an intent, oldest first.
func (s *Store) EventsOf(ctx context.Context, k Key) ([]Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, owner_id, event_type, rail_account, sik, payload, created_at
		FROM outbox WHERE rail_account = $1 AND sik = $2 ORDER BY id`, k.RailAccount, k.SIK)
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: events: %w", err))
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.OwnerID, &e.Type, &e.RailAccount, &e.SIK, &e.Payload, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: events: %w", err))
	}
	return evs, nil
}

// DeadLetterState is where a dead letter stands.
type DeadLetterState string

// Dead letter states; "" as a filter means both.
const (
	DeadLetterDead     DeadLetterState = "dead"     // waiting for the owner
	DeadLetterReplayed DeadLetterState = "replayed" // put back for delivery
)

// DeadLetter is a delivery that exhausted its attempts (and perhaps was
// replayed since).
type DeadLetter struct {
	OutboxID   int64
	WebhookID  string
	EventType  string
	State      DeadLetterState
	Attempts   int
	LastStatus int
	LastError  string
	CreatedAt  time.Time // when the event was written
	DeadAt     time.Time
	ReplayedAt *time.Time
}

// ID is the dead letter's id (its DeliveryID).
func (d DeadLetter) ID() string { return DeliveryID(d.OutboxID, d.WebhookID) }

// DeadLetterQuery selects and pages dead letters.
type DeadLetterQuery struct {
	// PageSize 0 means 50; at most 1000.
	PageSize  int
	PageToken string
	// WebhookID, when set, keeps that webhook's only.
	WebhookID string
	// State, when set, keeps those in that state only.
	State DeadLetterState
}

const deadLetterColumns = `d.outbox_id, d.webhook_id, o.event_type,
	CASE WHEN d.state = 'dead' THEN 'dead' ELSE 'replayed' END, d.attempts, d.last_status, d.last_error,
	o.created_at, d.dead_at, d.replayed_at`

func scanDeadLetter(row pgx.Row) (DeadLetter, error) {
	var d DeadLetter
	var state string
	err := row.Scan(&d.OutboxID, &d.WebhookID, &d.EventType, &state, &d.Attempts, &d.LastStatus, &d.LastError,
		&d.CreatedAt, &d.DeadAt, &d.ReplayedAt)
	d.State = DeadLetterState(state)
	return d, err
}

// ListDeadLetters pages through the dead letters of ownerID's live
// webhooks, oldest event first; next is "" on the last page.
func (s *Store) ListDeadLetters(ctx context.Context, ownerID string, q DeadLetterQuery) (_ []DeadLetter, next string, _ error) {
	size, err := outboxPageSize(q.PageSize)
	if err != nil {
		return nil, "", err
	}
	switch q.State {
	case "", DeadLetterDead, DeadLetterReplayed:
	default:
		return nil, "", fmt.Errorf("%w: dead letter state %q", ErrOutboxInvalid, q.State)
	}
	var afterOutbox int64
	afterWebhook := ""
	if q.PageToken != "" {
		n, w, err := decodeOutboxToken(q.PageToken)
		if err != nil {
			return nil, "", err
		}
		if afterOutbox, err = strconv.ParseInt(n, 10, 64); err != nil {
			return nil, "", fmt.Errorf("%w: page token", ErrOutboxInvalid)
		}
		afterWebhook = w
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterColumns+`
		FROM outbox_deliveries d JOIN outbox o ON o.id = d.outbox_id JOIN webhooks w ON w.id = d.webhook_id
		WHERE w.owner_id = $1 AND w.deleted_at IS NULL
		  AND d.dead_at IS NOT NULL AND d.state IN ('dead', 'pending', 'delivered')
		  AND ($2 = '' OR d.webhook_id = $2)
		  AND ($3 = '' OR ($3 = 'dead') = (d.state = 'dead'))
		  AND (d.outbox_id, d.webhook_id) > ($4, $5)
		ORDER BY d.outbox_id, d.webhook_id LIMIT $6`,
		ownerID, q.WebhookID, string(q.State), afterOutbox, afterWebhook, size+1)
	if err != nil {
		return nil, "", classify(fmt.Errorf("ledger: list dead letters: %w", err))
	}
	dls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadLetter, error) { return scanDeadLetter(r) })
	if err != nil {
		return nil, "", classify(fmt.Errorf("ledger: list dead letters: %w", err))
	}
	if len(dls) > size {
		dls = dls[:size]
		last := dls[size-1]
		next = encodeOutboxToken(strconv.FormatInt(last.OutboxID, 10), last.WebhookID)
	}
	return dls, next, nil
}

// ReplayDeadLetter puts one of ownerID's dead letters back in the outbox:
// pending, due now, with its attempts reset. Replaying one already
// replayed and not yet dead again changes nothing and returns it.
// ErrNotFound when there is no such dead letter on a live webhook.
func (s *Store) ReplayDeadLetter(ctx context.Context, ownerID string, outboxID int64, webhookID string) (DeadLetter, error) {
	var out DeadLetter
	err := s.inTx(ctx, OpDeadLetterReplay, func(tx *Tx) error {
		var state string
		err := tx.tx.QueryRow(ctx, `
			SELECT d.state FROM outbox_deliveries d JOIN webhooks w ON w.id = d.webhook_id
			WHERE d.outbox_id = $1 AND d.webhook_id = $2 AND w.owner_id = $3 AND w.deleted_at IS NULL
			  AND d.dead_at IS NOT NULL
			FOR UPDATE OF d`, outboxID, webhookID, ownerID).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) || state == "dropped" {
			return fmt.Errorf("%w: dead letter %s", ErrNotFound, DeliveryID(outboxID, webhookID))
		}
		if err != nil {
			return err
		}
		if state == "dead" {
			if _, err := tx.tx.Exec(ctx, `
				UPDATE outbox_deliveries SET state = 'pending', attempts = 0, next_attempt_at = now(), replayed_at = now()
				WHERE outbox_id = $1 AND webhook_id = $2`, outboxID, webhookID); err != nil {
				return err
			}
		}
		out, err = scanDeadLetter(tx.tx.QueryRow(ctx, `SELECT `+deadLetterColumns+`
			FROM outbox_deliveries d JOIN outbox o ON o.id = d.outbox_id
			WHERE d.outbox_id = $1 AND d.webhook_id = $2`, outboxID, webhookID))
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return DeadLetter{}, classify(fmt.Errorf("ledger: replay dead letter: %w", err))
	}
	return out, err
}

func outboxPageSize(n int) (int, error) {
	switch {
	case n == 0:
		return 50, nil
	case n < 0 || n > 1000:
		return 0, fmt.Errorf("%w: page size %d (1 to 1000)", ErrOutboxInvalid, n)
	}
	return n, nil
}

// Page tokens are opaque to callers: base64url("<a>\n<b>").
func encodeOutboxToken(a, b string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(a + "\n" + b))
}

func decodeOutboxToken(tok string) (string, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", "", fmt.Errorf("%w: page token", ErrOutboxInvalid)
	}
	a, b, ok := strings.Cut(string(raw), "\n")
	if !ok {
		return "", "", fmt.Errorf("%w: page token", ErrOutboxInvalid)
	}
	return a, b, nil
}
