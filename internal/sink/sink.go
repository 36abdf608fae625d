package sink

import (
	"context"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Record is one event as the sink runtime hands it to a destination.
type Record struct {
	// Seq is the JetStream stream sequence of the event.
	Seq uint64
	// Event is the event itself.
	Event events.Event
	// PublishedAt is when JetStream stored the event.
	PublishedAt time.Time
}

// Key identifies the row an event changes in a destination.
type Key struct {
	Tenant    string
	ProductID string
}

// Key returns the destination key of r.
func (r Record) Key() Key { return Key{Tenant: r.Event.Tenant, ProductID: r.Event.ProductID} }

// Sink is a destination the runtime applies batches to.
type Sink interface {
	// Name names the destination ("postgres", "clickhouse", ...) in logs,
	// metrics and dead letters.
	Name() string
	// Apply applies a batch idempotently: re-applying changes nothing; an
	// older version never overwrites a newer one; deletes are versioned
	// tombstones. It must not modify batch (the runtime reuses it).
	//
	// Permanent per-record problems are reported in the returned []error
	// (len == len(batch), nil = applied, otherwise a *PermanentError) while
	// the other records are applied. A batch-wide (usually transient)
	// failure returns a non-nil error and a nil slice: nothing is reported
	// applied, and the runtime retries the whole batch.
	Apply(ctx context.Context, batch []Record) ([]error, error)
}

// CaughtUp says whether the dispatcher marked the Apply call's work item
// as its tenant's last for now (work.Item.CaughtUp: nothing more was
// waiting for this destination when it was cut). A sink that holds calls
// back to combine them into fewer writes (the ClickHouse sink) holds back
// only such a call: holding an item whose tenant is behind keeps the
// tenant's slot and slows it down, while a caught-up tenant loses only
// latency. False when ctx does not say (a sink used on its own, an item
// from a dispatcher that does not mark items, a re-dispatched orphan).
func CaughtUp(ctx context.Context) bool {
	v, _ := ctx.Value(caughtUpKey{}).(bool)
	return v
}

// WithCaughtUp returns ctx carrying the hint CaughtUp reads.
func WithCaughtUp(ctx context.Context, caughtUp bool) context.Context {
	return context.WithValue(ctx, caughtUpKey{}, caughtUp)
}

type caughtUpKey struct{}
