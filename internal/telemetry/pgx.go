package telemetry

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// dbSystem is the database's name under both semantic-convention keys:
// db.system.name (current) and db.system (what many backends still group
// database spans by).
var dbSystem = []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, attribute.String("db.system", "postgresql")}

// PgxTracer traces the ledger's statements (pgx.QueryTracer and
// pgx.BatchTracer): one client span per statement or batch, as a child of
// the span in the context. A statement outside any span (readiness
// probes, pool upkeep) is not traced. Only the SQL text is recorded, never
// its arguments.
type PgxTracer struct {
	tracer trace.Tracer
}

// NewPgxTracer returns a pgx tracer over tp.
func NewPgxTracer(tp trace.TracerProvider) *PgxTracer { return &PgxTracer{tracer: Tracer(tp)} }

var (
	_ pgx.QueryTracer = (*PgxTracer)(nil)
	_ pgx.BatchTracer = (*PgxTracer)(nil)
)

// start starts a span under the one in ctx, if there is one, and marks the
// context so that finish ends exactly the spans start began.
func (t *PgxTracer) start(ctx context.Context, name string, attrs ...attribute.KeyValue) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, dbSystem...)...))
	return context.WithValue(ctx, startedKey{}, true)
}

type startedKey struct{}

func (t *PgxTracer) finish(ctx context.Context, err error) {
	if started, _ := ctx.Value(startedKey{}).(bool); started {
		End(trace.SpanFromContext(ctx), err)
	}
}

// TraceQueryStart starts a statement's span.
func (t *PgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op := operation(data.SQL)
	return t.start(ctx, op+" postgresql", semconv.DBOperationName(op), semconv.DBQueryText(data.SQL))
}

// TraceQueryEnd ends it.
func (t *PgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	t.finish(ctx, data.Err)
}

// TraceBatchStart starts a batch's span; its statements become events.
func (t *PgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	return t.start(ctx, "BATCH postgresql", semconv.DBOperationName("BATCH"), semconv.DBOperationBatchSize(n))
}

// TraceBatchQuery notes one statement of a batch.
func (t *PgxTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if started, _ := ctx.Value(startedKey{}).(bool); !started {
		return
	}
	span := trace.SpanFromContext(ctx)
	op := operation(data.SQL)
	attrs := []attribute.KeyValue{semconv.DBOperationName(op)}
	if data.Err != nil {
		attrs = append(attrs, attribute.String("error.message", errorText(data.Err)))
	}
	span.AddEvent("db.statement", trace.WithAttributes(attrs...))
}

// TraceBatchEnd ends the batch's span.
func (t *PgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	t.finish(ctx, data.Err)
}

// operation is a statement's first keyword (SELECT, INSERT, WITH, BEGIN…).
func operation(sql string) string {
	sql = strings.TrimSpace(sql)
	for strings.HasPrefix(sql, "--") {
		nl := strings.IndexByte(sql, '\n')
		if nl < 0 {
			return "SQL"
		}
		sql = strings.TrimSpace(sql[nl+1:])
	}
	end := strings.IndexFunc(sql, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '(' || r == ';' })
	if end < 0 {
		end = len(sql)
	}
	if end == 0 {
		return "SQL"
	}
	return strings.ToUpper(sql[:end])
}
