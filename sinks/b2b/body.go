package b2b

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Body is the JSON document of one POST. Partners may decode it with this
// type.
type Body struct {
	Tenant  string      `json:"tenant"`
	Partner string      `json:"partner"`
	Events  []BodyEvent `json:"events"`
}

// BodyEvent is one event in a Body.
type BodyEvent struct {
	// Seq is the event's sequence in fairway's stream: unique per event.
	Seq        uint64          `json:"seq"`
	ProductID  string          `json:"product_id"`
	Version    int64           `json:"version"`
	Op         events.Op       `json:"op"`
	OccurredAt time.Time       `json:"occurred_at"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// envelope is the fixed part of a body around the events of one tenant:
// prefix + event[0] + "," + event[1] … + suffix.
type envelope struct {
	prefix, suffix []byte
}

func newEnvelope(tenant, partner string) envelope {
	t, _ := json.Marshal(tenant)
	p, _ := json.Marshal(partner)
	prefix := make([]byte, 0, len(t)+len(p)+32)
	prefix = append(prefix, `{"tenant":`...)
	prefix = append(prefix, t...)
	prefix = append(prefix, `,"partner":`...)
	prefix = append(prefix, p...)
	prefix = append(prefix, `,"events":[`...)
	return envelope{prefix: prefix, suffix: []byte("]}")}
}

// size is the body length of one event of n bytes alone.
func (e envelope) size(n int) int { return len(e.prefix) + n + len(e.suffix) }

// checkEvent returns the *sink.PermanentError of an event the sink cannot
// send: an unknown op, an upsert without payload, a payload that is not
// JSON, a time outside years 0..9999. nil when it can be sent.
func checkEvent(r *sink.Record) error {
	e := &r.Event
	switch {
	case !e.Op.Valid():
		return sink.Permanent(fmt.Sprintf("unknown op %q", e.Op), sink.ErrInvalidRecord)
	case e.Op == events.OpUpsert && len(e.Payload) == 0:
		return sink.Permanent("upsert without payload", sink.ErrInvalidRecord)
	}
	if err := encodable(e); err != nil {
		return sink.Permanent("event does not encode as JSON", errors.Join(sink.ErrInvalidRecord, err))
	}
	return nil
}

// encodable reports why e cannot be written as a BodyEvent, nil when it
// can.
func encodable(e *events.Event) error {
	if len(e.Payload) > 0 && !events.Valid(e.Payload) {
		return errors.New("payload is not valid JSON")
	}
	if y := e.OccurredAt.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("occurred_at year %d outside 0..9999", y)
	}
	return nil
}

// appendEvent appends the JSON of r as a BodyEvent to b, written by hand
// (it was half of the sink's CPU time through encoding/json);
// TestEncodeEvent checks it against json.Marshal. On error b is returned
// unchanged.
func appendEvent(b []byte, r *sink.Record) ([]byte, error) {
	if err := encodable(&r.Event); err != nil {
		return b, err
	}
	return appendCheckedEvent(b, r), nil
}

// appendCheckedEvent is appendEvent for an event that passed checkEvent.
func appendCheckedEvent(b []byte, r *sink.Record) []byte {
	e := &r.Event
	b = slices.Grow(b, eventSizeHint(r))
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"product_id":`...)
	b = appendString(b, e.ProductID)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, e.Version, 10)
	b = append(b, `,"op":`...)
	b = appendString(b, string(e.Op))
	b = append(b, `,"occurred_at":"`...)
	b = e.OccurredAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if len(e.Payload) > 0 {
		b = append(b, `,"payload":`...)
		b = append(b, e.Payload...)
	}
	return append(b, '}')
}

// eventSizeHint is about the size of r's JSON: room for the fixed keys,
// the numbers and the time, plus its product id and payload.
func eventSizeHint(r *sink.Record) int { return 112 + len(r.Event.ProductID) + len(r.Event.Payload) }

// appendString appends s as a JSON string: plain printable ASCII directly,
// anything else through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// chunks splits idx into runs whose bodies fit max bytes and that hold at
// most maxEvents events (0: no bound). Every single encoded event must
// already fit.
func (e envelope) chunks(idx []int, enc [][]byte, max, maxEvents int) [][]int {
	var out [][]int
	start, size := 0, len(e.prefix)+len(e.suffix)
	for j, i := range idx {
		add := len(enc[i])
		if j > start {
			add++ // comma
		}
		if j > start && (size+add > max || maxEvents > 0 && j-start >= maxEvents) {
			out = append(out, idx[start:j])
			start, size, add = j, len(e.prefix)+len(e.suffix), len(enc[i])
		}
		size += add
	}
	if start < len(idx) {
		out = append(out, idx[start:])
	}
	return out
}

// build writes the body of the events at idx into buf.
func (e envelope) build(buf []byte, idx []int, enc [][]byte) []byte {
	need := len(e.prefix) + len(e.suffix) + len(idx)
	for _, i := range idx {
		need += len(enc[i])
	}
	if cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	buf = append(buf[:0], e.prefix...)
	for j, i := range idx {
		if j > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, enc[i]...)
	}
	return append(buf, e.suffix...)
}

// idempotencyKey names the set of events of one request: the same events
// (by stream sequence) for the same tenant and partner give the same key, on
// every retry and every process. Sequences, not just the first and last,
// go in, so that two different subsets of a batch (after bisection) never
// share a key.
func idempotencyKey(tenant, partner string, batch []sink.Record, idx []int) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(partner))
	h.Write([]byte{0})
	var b [8]byte
	for _, i := range idx {
		binary.BigEndian.PutUint64(b[:], batch[i].Seq)
		h.Write(b[:])
	}
	return "fw1-" + hex.EncodeToString(h.Sum(nil)[:16])
}
