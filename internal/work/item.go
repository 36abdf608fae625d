package work

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Stream and subject names.
const (
	StreamName    = "WORK"
	SubjectPrefix = "work"
)

// ErrInvalidItem marks a work item that cannot be handed off or applied.
var ErrInvalidItem = errors.New("invalid work item")

// errRedriveBare: a redrive (Item.Redrive) must carry its events; read
// from PRODUCTS, its sequences may name other events.
var errRedriveBare = fmt.Errorf("%w: a redrive carries its events, this one none", ErrInvalidItem)

// Item is one batch of a tenant's events for one destination: the PRODUCTS
// sequences From..To (inclusive) on the tenant's subjects, Count of them,
// dispatched under the slot lease LeaseID with fencing token Token.
type Item struct {
	Tenant       string    `json:"tenant"`
	Dest         string    `json:"dest"`
	FromSeq      uint64    `json:"from_seq"`
	ToSeq        uint64    `json:"to_seq"`
	Count        int       `json:"count"`
	LeaseID      string    `json:"lease_id"`
	Token        int64     `json:"token"`
	DispatchedAt time.Time `json:"dispatched_at"`
	// Replay is set when the range is dispatched again by a replay (its
	// replay lane).
	Replay bool `json:"replay,omitempty"`
	// Priority, when set, says the item holds the tenant's events of that
	// priority only (a live lane's batch: the range may hold its events of
	// other priorities, which the sink leaves out); "" holds every event
	// of the tenant in the range (a replay's, a re-dispatched range).
	Priority events.Priority `json:"priority,omitempty"`
	// CaughtUp is set when the tenant had nothing more waiting for the
	// destination when the item was cut: it is the last batch of its
	// grant and no backlog was left beyond it (as far as the dispatcher
	// could count: not while its start-up backfill was still delivering
	// the tenant's backlog). A sink may hold such an
	// item back to combine it with others (ClickHouse), costing the tenant
	// latency only; an item without it is never held, as that would keep
	// the tenant's slot and slow it down (sink.CaughtUp). Re-dispatched
	// orphans never carry it.
	CaughtUp bool `json:"caught_up,omitempty"`
	// Seqs, when set, are the sequences of the item's events (Count of
	// them, FromSeq first, ToSeq last): the dispatcher lists them for a
	// batch whose range holds other tenants' events, so the sink gets a
	// small one's events each by sequence instead of having the server
	// scan the range, and reads one whose range is at most 4 times its
	// count by sequence, keeping the listed ones (RangeRead). At most
	// SeqsMax.
	Seqs []uint64 `json:"seqs,omitempty"`
	// Times, when set, are when PRODUCTS stored each of the item's Count
	// events. The dispatcher sets them when its doorbell delivered every
	// event of the item; the sink then reads the events' bodies without
	// their headers (docs/sinks.md, "Reading without headers").
	Times *Times `json:"times,omitempty"`
	// Bodies, when set, are the item's events themselves, Count of them
	// in sequence order, FromSeq first and ToSeq last: the dispatcher
	// carries the events its doorbell delivered, so the sink applies them
	// without reading PRODUCTS. Seqs and Times are then empty (the bodies
	// carry both). Nil: the sink reads the events from PRODUCTS. Bodies go
	// on the wire in the binary form of wire_bodies.go, never as JSON.
	Bodies []Body `json:"-"`
	// Redrive marks an item that sends dead letters back to the one
	// destination that refused them (internal/dlq, Queue.Redrive). It
	// carries the letters' events (Bodies), under the sequences PRODUCTS
	// stored them at, which it may no longer hold: a sink applies them as
	// it applies any carried events, but does not look their headers up
	// in PRODUCTS, and dead-letters one that fails again as a new letter
	// (dlq.Letter.Redriven) rather than as a duplicate of the old one.
	Redrive bool `json:"redrive,omitempty"`
}

// Times are the store times of an item's events to the millisecond:
// event i was stored at Unix millisecond BaseMs + OffsetsMs[i].
type Times struct {
	BaseMs    int64    `json:"base_ms"`
	OffsetsMs []uint32 `json:"offsets_ms"`
}

// Add appends the store time of the next event, Unix millisecond ms. It
// reports false when ms does not fit (before BaseMs or more than 49 days
// after it); the Times are then unusable.
func (t *Times) Add(ms int64) bool {
	off := ms - t.BaseMs
	if off < 0 || off > math.MaxUint32 {
		return false
	}
	t.OffsetsMs = append(t.OffsetsMs, uint32(off))
	return true
}

// At returns when the i-th event was stored.
func (t *Times) At(i int) time.Time {
	return time.UnixMilli(t.BaseMs + int64(t.OffsetsMs[i])).UTC()
}

// SeqsMax is the most sequences an item lists (Item.Seqs); an item that
// lists more is invalid. ReadItem reads them ReadChunk at a time.
const SeqsMax = 1000

// SeqsSmall is the most sequences the dispatcher lists for a batch that
// neither RangeRead nor LookupRead takes: the sink then looks each up.
const SeqsSmall = 64

// Validate checks the fields a sink relies on.
func (it Item) Validate() error {
	var errs []string
	if err := events.ValidateTenant(it.Tenant); err != nil {
		errs = append(errs, err.Error())
	}
	if err := kind.Check(it.Dest); err != nil { // a destination is one subject token
		errs = append(errs, err.Error())
	}
	if it.FromSeq == 0 || it.ToSeq < it.FromSeq {
		errs = append(errs, fmt.Sprintf("range %d..%d is empty or reversed", it.FromSeq, it.ToSeq))
	}
	if it.Count < 1 || uint64(it.Count) > it.ToSeq-it.FromSeq+1 {
		errs = append(errs, fmt.Sprintf("count %d does not fit range %d..%d", it.Count, it.FromSeq, it.ToSeq))
	}
	if it.LeaseID == "" {
		errs = append(errs, "lease_id is empty")
	}
	if !it.Priority.Valid() {
		errs = append(errs, fmt.Sprintf("priority %q is not one of high, normal, bulk", it.Priority))
	}
	if n := len(it.Seqs); n > 0 {
		ok := n == it.Count && n <= SeqsMax && it.Seqs[0] == it.FromSeq && it.Seqs[n-1] == it.ToSeq
		for i := 1; ok && i < n; i++ {
			ok = it.Seqs[i] > it.Seqs[i-1]
		}
		if !ok {
			errs = append(errs, fmt.Sprintf("seqs %v do not list the %d events of range %d..%d in order", it.Seqs, it.Count, it.FromSeq, it.ToSeq))
		}
	}
	if it.Times != nil && len(it.Times.OffsetsMs) != it.Count {
		errs = append(errs, fmt.Sprintf("times list %d events, count is %d", len(it.Times.OffsetsMs), it.Count))
	}
	if it.Bodies != nil {
		errs = append(errs, it.bodiesProblems()...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidItem, strings.Join(errs, "; "))
	}
	return nil
}

// Subject is work.<dest>.<tenant>.
func (it Item) Subject() string { return Subject(it.Dest, it.Tenant) }

// Subject returns work.<dest>.<tenant>. Both must be valid (Item.Validate).
func Subject(dest, tenant string) string {
	return SubjectPrefix + "." + dest + "." + tenant
}

// FilterSubject is the WORK subject filter of one destination's consumer.
func FilterSubject(dest string) string { return SubjectPrefix + "." + dest + ".>" }

// ConsumerName is the durable consumer on WORK that every sink process of
// dest shares (a ':' is not allowed in a consumer name).
func ConsumerName(dest string) string { return "sink-" + strings.ReplaceAll(dest, ":", "-") }

// MsgID makes a re-sent item a duplicate and a replayed range new work.
// It is the range under the lease: the lease id names the slot and its
// fencing token, and a token alone is not unique (each slot of a pair
// counts its own), so two leases of one pair must not share an id.
func (it Item) MsgID() string {
	return fmt.Sprintf("%s/%d-%d", it.LeaseID, it.FromSeq, it.ToSeq)
}

// Msg returns the message that hands it off: JSON, or the binary form
// when it carries bodies (body.go).
func (it Item) Msg() (*nats.Msg, error) {
	if err := it.Validate(); err != nil {
		return nil, err
	}
	var (
		b   []byte
		err error
	)
	if it.Bodies != nil {
		b, err = it.appendBodies(nil)
	} else if it.Redrive {
		return nil, errRedriveBare
	} else {
		b, err = json.Marshal(it.wire())
	}
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(it.Subject())
	m.Header.Set(nats.MsgIdHdr, it.MsgID())
	m.Data = b
	return m, nil
}

// Decode reads an Item from a WORK message body, in either form (JSON,
// or binary with bodies: its first byte), and validates it. The Data of
// its Bodies alias data: data must not change while they are used.
func Decode(data []byte) (Item, error) {
	if len(data) > 0 && data[0] == wireBodies {
		return decodeBodies(data)
	}
	var w wireItem
	if err := json.Unmarshal(data, &w); err != nil {
		return Item{}, fmt.Errorf("%w: %v", ErrInvalidItem, err)
	}
	it, err := w.item()
	if err != nil {
		return it, fmt.Errorf("%w: %v", ErrInvalidItem, err)
	}
	if it.Redrive {
		return it, errRedriveBare
	}
	return it, it.Validate()
}
