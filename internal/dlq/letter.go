package dlq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream and subject names.
const (
	StreamName    = "DLQ"
	SubjectPrefix = "dlq"
)

// Kind says what a letter holds.
type Kind string

const (
	// KindEvent holds one event as PRODUCTS stored it.
	KindEvent Kind = "event"
	// KindRange records events lost from PRODUCTS before they were applied;
	// it holds the work item.
	KindRange Kind = "range"
)

// Headers of a letter. Letters of KindEvent also keep the event's own
// Fairway-* headers (events.HeaderTenant, …).
const (
	HeaderKind          = "Fairway-Dlq-Kind"
	HeaderDest          = "Fairway-Dlq-Dest"
	HeaderTenant        = "Fairway-Dlq-Tenant"
	HeaderReason        = "Fairway-Dlq-Reason"
	HeaderClass         = "Fairway-Dlq-Class"
	HeaderRule          = "Fairway-Dlq-Rule"
	HeaderAttempts      = "Fairway-Dlq-Attempts"
	HeaderFirstFailure  = "Fairway-Dlq-First-Failure"
	HeaderLastFailure   = "Fairway-Dlq-Last-Failure"
	HeaderSourceStream  = "Fairway-Dlq-Source-Stream"
	HeaderSourceSeq     = "Fairway-Dlq-Source-Seq"
	HeaderSourceSubject = "Fairway-Dlq-Source-Subject"
	HeaderLease         = "Fairway-Dlq-Lease"
	HeaderDeliveries    = "Fairway-Dlq-Deliveries"
	HeaderRedriven      = "Fairway-Dlq-Redriven"
)

// maxReasonBytes bounds the reason header; NATS headers are not for essays.
const maxReasonBytes = 1024

// Letter is one dead letter.
type Letter struct {
	Kind   Kind
	Dest   string
	Tenant string
	// Reason says why, for a person: the error, and what the runtime did.
	Reason string
	// Class is the classification of the last failure ("permanent",
	// "transient" after the backoff gave up, "unknown" after the attempts
	// ran out).
	Class string
	// Rule is the classification table row that matched.
	Rule string
	// Attempts is how many times the event was tried in the delivery that
	// gave up (0 when it was never tried: a lost range, an invalid event).
	Attempts int
	// Deliveries is the work item's JetStream delivery count.
	Deliveries   uint64
	FirstFailure time.Time
	LastFailure  time.Time
	// SourceStream, SourceSeq, SourceSubject locate the event in PRODUCTS
	// (for a range: SourceSeq is the range's first sequence).
	SourceStream  string
	SourceSeq     uint64
	SourceSubject string
	// Lease is the slot lease the work item ran under.
	Lease string
	// Redriven says the event failed again after a redrive sent it back
	// (work.Item.Redrive); such a letter is a new one, not a duplicate of
	// the letter redriven.
	Redriven bool
	// Header holds the event's own headers (KindEvent).
	Header nats.Header
	// Data is the event as stored (KindEvent) or the work item (KindRange).
	Data []byte

	// ID and StoredAt are set on letters read back: the DLQ stream
	// sequence and time.
	ID       uint64
	StoredAt time.Time
}

// Subject returns dlq.<dest>.<tenant>.
func Subject(dest, tenant string) string { return SubjectPrefix + "." + dest + "." + tenant }

// FilterSubject matches the letters of dest and tenant; "" matches any.
func FilterSubject(dest, tenant string) string {
	if dest == "" {
		dest = "*"
	}
	if tenant == "" {
		tenant = "*"
	}
	return Subject(dest, tenant)
}

// MsgID is the letter's dedup key: one letter per destination and source
// event (or lost range and lease; or redrive lease and event).
func (l *Letter) MsgID() string {
	if l.Kind == KindRange {
		return fmt.Sprintf("dlq/%s/range/%s", l.Dest, l.Lease)
	}
	if l.Redriven {
		return fmt.Sprintf("dlq/%s/redrive/%s/%d", l.Dest, l.Lease, l.SourceSeq)
	}
	return fmt.Sprintf("dlq/%s/%s/%d", l.Dest, l.SourceStream, l.SourceSeq)
}

// Msg returns the message that stores l.
func (l *Letter) Msg() *nats.Msg {
	m := nats.NewMsg(Subject(l.Dest, l.Tenant))
	for k, v := range l.Header {
		if strings.HasPrefix(k, "Fairway-") && !strings.HasPrefix(k, "Fairway-Dlq-") {
			m.Header[k] = append([]string(nil), v...)
		}
	}
	set := func(k, v string) {
		if v != "" {
			m.Header.Set(k, v)
		}
	}
	set(nats.MsgIdHdr, l.MsgID())
	set(HeaderKind, string(l.Kind))
	set(HeaderDest, l.Dest)
	set(HeaderTenant, l.Tenant)
	set(HeaderReason, oneLine(l.Reason))
	set(HeaderClass, l.Class)
	set(HeaderRule, l.Rule)
	set(HeaderAttempts, strconv.Itoa(l.Attempts))
	set(HeaderDeliveries, strconv.FormatUint(l.Deliveries, 10))
	set(HeaderFirstFailure, formatTime(l.FirstFailure))
	set(HeaderLastFailure, formatTime(l.LastFailure))
	set(HeaderSourceStream, l.SourceStream)
	set(HeaderSourceSeq, strconv.FormatUint(l.SourceSeq, 10))
	set(HeaderSourceSubject, l.SourceSubject)
	set(HeaderLease, l.Lease)
	if l.Redriven {
		set(HeaderRedriven, "true")
	}
	m.Data = l.Data
	return m
}

// Parse reads a letter back from a DLQ message.
func Parse(m *jetstream.RawStreamMsg) (Letter, error) {
	h := m.Header
	l := Letter{
		Kind:          Kind(h.Get(HeaderKind)),
		Dest:          h.Get(HeaderDest),
		Tenant:        h.Get(HeaderTenant),
		Reason:        h.Get(HeaderReason),
		Class:         h.Get(HeaderClass),
		Rule:          h.Get(HeaderRule),
		SourceStream:  h.Get(HeaderSourceStream),
		SourceSubject: h.Get(HeaderSourceSubject),
		Lease:         h.Get(HeaderLease),
		Data:          m.Data,
		ID:            m.Sequence,
		StoredAt:      m.Time,
		Header:        nats.Header{},
	}
	if l.Kind != KindEvent && l.Kind != KindRange {
		return l, fmt.Errorf("%w: message %d has kind %q", ErrNotLetter, m.Sequence, l.Kind)
	}
	l.Redriven = h.Get(HeaderRedriven) == "true"
	l.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	l.Deliveries, _ = strconv.ParseUint(h.Get(HeaderDeliveries), 10, 64)
	l.SourceSeq, _ = strconv.ParseUint(h.Get(HeaderSourceSeq), 10, 64)
	l.FirstFailure, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderFirstFailure))
	l.LastFailure, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderLastFailure))
	for k, v := range h {
		if strings.HasPrefix(k, "Fairway-") && !strings.HasPrefix(k, "Fairway-Dlq-") {
			l.Header[k] = v
		}
	}
	return l, nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// oneLine makes s safe as a header value: no line breaks, bounded.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < 0x20 && r != '\t' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxReasonBytes {
		cut := maxReasonBytes
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
