package events

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// Headers set on stored messages. Only what JetStream or tracing needs is
// a header: the tenant and op are in the subject, everything else in the
// JSON body, and the stream's own timestamp is the publish time. Each extra
// header costs publish throughput: the server parses and stores it with
// every message, and every reader that asks for headers gets it back.
const (
	HeaderMsgID     = "Nats-Msg-Id"        // Event.MsgID(), JetStream's dedup key
	HeaderRequestID = "Fairway-Request-Id" // the ingest request or caller-supplied id; absent when none
	// HeaderTraceParent is the W3C trace context of the publish
	// (ContextWithTraceParent); absent unless tracing is on and the
	// request sampled.
	HeaderTraceParent = "traceparent"
)

// headerExpectedStream makes JetStream reject a message whose subject is
// bound to another stream than the expected one.
const headerExpectedStream = "Nats-Expected-Stream"

// Msg returns the message that stores e: its subject, HeaderMsgID and the
// JSON of the whole event as data, tenant included. It validates e with
// the default Limits first; callers with other limits validate themselves
// and use a Publisher, or overwrite what they need on the returned message.
func (e Event) Msg() (*nats.Msg, error) {
	if err := e.Validate(Limits{}); err != nil {
		return nil, err
	}
	return e.msg(callContext{}, ""), nil
}

// msg builds the message for a validated event.
func (e *Event) msg(call callContext, expectStream string) *nats.Msg {
	h := make(nats.Header, 3)
	h[HeaderMsgID] = []string{e.MsgID()}
	if call.requestID != "" {
		h[HeaderRequestID] = []string{call.requestID}
	}
	if call.traceParent != "" {
		h[HeaderTraceParent] = []string{call.traceParent}
	}
	if expectStream != "" {
		h[headerExpectedStream] = []string{expectStream}
	}
	return &nats.Msg{
		Subject: SubjectPrefix + "." + e.Tenant + "." + string(e.Op) + e.Priority.subjectSuffix(),
		Header:  h,
		Data:    e.appendJSON(make([]byte, 0, 160+len(e.ProductID)+len(e.Payload)+len(e.IdempotencyKey))),
	}
}

// MarshalJSON writes the event in its wire form. It is equivalent to the
// struct tags, only faster, and writes occurred_at in UTC.
func (e Event) MarshalJSON() ([]byte, error) {
	if len(e.Payload) > 0 && !Valid(e.Payload) {
		pos, msg := syntaxError(e.Payload)
		return nil, &ValidationError{Field: "payload", Reason: fmt.Sprintf("is not valid JSON at byte %d: %s", pos, msg), Err: ErrMalformedJSON}
	}
	if y := e.OccurredAt.Year(); y < 0 || y > 9999 {
		return nil, invalid("occurred_at", "year %d is outside 0..9999", y)
	}
	return e.appendJSON(nil), nil
}

// appendJSON appends the event's JSON. Payload must be valid JSON.
func (e *Event) appendJSON(b []byte) []byte {
	b = append(b, '{')
	if e.Tenant != "" {
		b = append(b, `"tenant":`...)
		b = appendString(b, e.Tenant)
		b = append(b, ',')
	}
	b = append(b, `"product_id":`...)
	b = appendString(b, e.ProductID)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, e.Version, 10)
	b = append(b, `,"op":`...)
	b = appendString(b, string(e.Op))
	b = append(b, `,"occurred_at":"`...)
	b = e.OccurredAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if len(e.Payload) > 0 {
		b = append(b, `,"payload":`...)
		b = append(b, e.Payload...)
	}
	if e.IdempotencyKey != "" {
		b = append(b, `,"idempotency_key":`...)
		b = appendString(b, e.IdempotencyKey)
	}
	if e.Priority.Or() != PriorityNormal {
		b = append(b, `,"priority":`...)
		b = appendString(b, string(e.Priority))
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (invalid UTF-8 becomes U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Decode parses the data of a stored message (Event.Msg) back into an
// Event. Unlike the ingest Decoder it ignores unknown fields, so consumers
// keep working when a newer publisher adds one, and it applies no size
// limits (the publisher applied its own); every other rule of Validate holds.
func Decode(data []byte) (Event, error) {
	if !Valid(data) {
		pos, msg := syntaxError(data)
		return Event{}, &ValidationError{Reason: fmt.Sprintf("stored event is not valid JSON at byte %d: %s", pos, msg), Err: ErrMalformedJSON}
	}
	ev, _, err := parseEvent(data, false)
	if err != nil {
		return Event{}, err
	}
	if err := ev.validate(noLimits, true); err != nil { // the payload is part of data, checked above
		return Event{}, err
	}
	return ev, nil
}

var noLimits = Limits{MaxPayloadBytes: math.MaxInt, MaxProductIDBytes: math.MaxInt, MaxKeyBytes: math.MaxInt}
