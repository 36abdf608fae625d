package events

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Op is what an event does to a product.
type Op string

const (
	// OpUpsert creates or replaces the product with Payload.
	OpUpsert Op = "upsert"
	// OpDelete removes the product; Payload is optional.
	OpDelete Op = "delete"
)

// ops lists every Op: the stream binds one subject per op
// (StreamSubjects).
var ops = []Op{OpUpsert, OpDelete}

// Valid reports whether o is a known op.
func (o Op) Valid() bool { return o == OpUpsert || o == OpDelete }

// Event is one change to one product of one tenant. Its JSON form is both the
// ingest wire format and the body of the message stored in JetStream.
type Event struct {
	// Tenant owns the product. Ingest fills it from the request when the
	// event leaves it out. See ValidateTenant.
	Tenant string `json:"tenant,omitempty"`
	// ProductID identifies the product within the tenant: non-empty, no
	// control characters, valid UTF-8, at most Limits.MaxProductIDBytes.
	ProductID string `json:"product_id"`
	// Version orders changes to one product; a destination never replaces
	// a newer version with an older one. It starts at 1.
	Version int64 `json:"version"`
	// Op is OpUpsert or OpDelete.
	Op Op `json:"op"`
	// OccurredAt is when the change happened upstream.
	OccurredAt time.Time `json:"occurred_at"`
	// Payload is the product document, a JSON object: required for upsert,
	// optional for delete.
	Payload json.RawMessage `json:"payload,omitempty"`
	// IdempotencyKey deduplicates publishes inside the stream's duplicate
	// window. Empty means Key()'s default.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Priority orders the tenant's events for each destination: high,
	// normal ("" is normal) or bulk. See Priority.
	Priority Priority `json:"priority,omitempty"`
}

// Key is the event's idempotency key: IdempotencyKey, or
// "tenant:product_id:version" when it is empty. MsgID scopes it to the
// tenant.
func (e Event) Key() string {
	if e.IdempotencyKey != "" {
		return e.IdempotencyKey
	}
	return e.defaultKey()
}

func (e Event) defaultKey() string {
	return e.Tenant + ":" + e.ProductID + ":" + strconv.FormatInt(e.Version, 10)
}

// MsgID is the Nats-Msg-Id the event is stored with, JetStream's
// de-duplication key. JetStream de-duplicates across the whole stream, so
// the id is scoped to the event's tenant: the default key is
// "tenant:product_id:version" as it stands, and an IdempotencyKey is
// stored as "tenant/key". A tenant id holds neither ':' nor '/', so no key
// one tenant chooses can equal an id of another tenant, while a tenant's
// own repeats still collapse.
func (e Event) MsgID() string {
	if e.IdempotencyKey != "" {
		return e.Tenant + "/" + e.IdempotencyKey
	}
	return e.defaultKey()
}

// Defaults for Limits.
const (
	MaxPayloadBytesDefault   = 256 << 10
	MaxProductIDBytesDefault = 256
	MaxKeyBytesDefault       = 512
)

// MaxPayloadDepth is how deeply a payload may nest objects and arrays; the
// payload object itself is level 1.
const MaxPayloadDepth = 64

// MaxPayloadNumberBytes bounds one number literal inside a payload, so a
// sink never has to parse a 200 KB number.
const MaxPayloadNumberBytes = 100

// Limits bounds the size of an event. The zero value means the defaults.
type Limits struct {
	// MaxPayloadBytes bounds len(Payload). Default MaxPayloadBytesDefault
	// (256 KiB).
	MaxPayloadBytes int
	// MaxProductIDBytes bounds len(ProductID). Default 256.
	MaxProductIDBytes int
	// MaxKeyBytes bounds len(IdempotencyKey). Default 512.
	MaxKeyBytes int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	l.MaxPayloadBytes = cmp.Or(l.MaxPayloadBytes, MaxPayloadBytesDefault)
	l.MaxProductIDBytes = cmp.Or(l.MaxProductIDBytes, MaxProductIDBytesDefault)
	l.MaxKeyBytes = cmp.Or(l.MaxKeyBytes, MaxKeyBytesDefault)
	return l
}

// Validate checks every rule of the event model against l (zero fields of l
// mean the defaults) and returns the first problem, checking fields in the
// order tenant, product_id, version, op, occurred_at, payload,
// idempotency_key, priority. The error is a *ValidationError, errors.Is
// ErrInvalidEvent.
func (e *Event) Validate(l Limits) error { return e.validate(l, false) }

// validate is Validate; jsonChecked says the payload is a slice of a
// document that already passed Valid (the decoder's case), so only
// its kind, size, depth and numbers are checked again.
func (e *Event) validate(l Limits, jsonChecked bool) error {
	l = l.WithDefaults()
	if e.Tenant == "" {
		return invalid("tenant", "is required")
	}
	if reason := tenantProblem(e.Tenant); reason != "" {
		return &ValidationError{Field: "tenant", Reason: quote(e.Tenant) + " " + reason, Err: ErrInvalidTenant}
	}
	if err := checkText("product_id", e.ProductID, l.MaxProductIDBytes); err != nil {
		return err
	}
	switch {
	case e.Version == 0:
		return invalid("version", "is required")
	case e.Version < 0:
		return invalid("version", "must be >= 1, got %d", e.Version)
	}
	switch {
	case e.Op == "":
		return invalid("op", "is required")
	case !e.Op.Valid():
		return invalid("op", "%s is not one of upsert, delete", quote(string(e.Op)))
	}
	if e.OccurredAt.IsZero() {
		return invalid("occurred_at", "is required")
	}
	if y := e.OccurredAt.UTC().Year(); y < 1 || y > 9999 { // stored in UTC
		return invalid("occurred_at", "year %d (in UTC) is outside 1..9999", y)
	}
	if e.Payload == nil {
		if e.Op == OpUpsert {
			return invalid("payload", "is required for upsert")
		}
	} else if err := checkPayload(e.Payload, l.MaxPayloadBytes, jsonChecked); err != nil {
		return err
	}
	if e.IdempotencyKey != "" {
		if err := checkText("idempotency_key", e.IdempotencyKey, l.MaxKeyBytes); err != nil {
			return err
		}
	}
	if !e.Priority.Valid() {
		return invalid("priority", "%s is not one of high, normal, bulk", quote(string(e.Priority)))
	}
	return nil
}

// checkText enforces the rules shared by product_id and idempotency_key:
// they travel in NATS headers, so no control characters.
func checkText(field, s string, max int) error {
	if s == "" {
		return invalid(field, "is required")
	}
	if len(s) > max {
		return invalid(field, "is %d bytes, limit %d", len(s), max)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return invalid(field, "%s is not valid UTF-8 (byte %d)", quote(s), i)
			}
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return invalid(field, "%s contains control character %U at byte %d", quote(s), r, i)
		}
	}
	return nil
}

// checkPayload checks that p is one JSON object within the size, depth and
// number-length limits.
func checkPayload(p json.RawMessage, max int, jsonChecked bool) error {
	if len(p) > max {
		return invalid("payload", "is %d bytes, limit %d", len(p), max)
	}
	t := bytes.TrimLeft(p, " \t\r\n")
	if len(t) == 0 {
		return invalid("payload", "is empty; it must be a JSON object")
	}
	if !jsonChecked && !Valid(p) {
		pos, msg := syntaxError(p)
		return &ValidationError{Field: "payload", Reason: fmt.Sprintf("is not valid JSON at byte %d: %s", pos, msg), Err: ErrMalformedJSON}
	}
	if t[0] != '{' {
		return invalid("payload", "must be a JSON object, got %s", jsonKind(t[0]))
	}
	return scanPayload(p)
}

// scanPayload walks a valid JSON document and enforces MaxPayloadDepth and
// MaxPayloadNumberBytes.
func scanPayload(p []byte) error {
	depth := 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"':
			for i++; i < len(p) && p[i] != '"'; i++ {
				if p[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
			if depth > MaxPayloadDepth {
				return invalid("payload", "nests deeper than %d levels (at byte %d)", MaxPayloadDepth, i)
			}
		case '}', ']':
			depth--
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			j := i
			for j < len(p) && isNumberByte(p[j]) {
				j++
			}
			if n := j - i; n > MaxPayloadNumberBytes {
				return invalid("payload", "has a %d-byte number at byte %d, limit %d", n, i, MaxPayloadNumberBytes)
			}
			i = j - 1
		}
	}
	return nil
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// jsonKind names the JSON type that starts with byte c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// syntaxError explains why b is not valid JSON: the 0-based position of the
// offending byte (len(b) when the input ended early) and what is wrong.
func syntaxError(b []byte) (pos int64, msg string) {
	var raw json.RawMessage
	err := json.Unmarshal(b, &raw)
	var se *json.SyntaxError
	switch {
	case err == nil:
		return 0, "unknown syntax error"
	case errors.As(err, &se):
		// Offset counts the bytes read, the bad one included; at the end
		// of the input nothing bad was read.
		if se.Offset < int64(len(b)) || strings.HasPrefix(se.Error(), "invalid character") {
			return max(se.Offset-1, 0), se.Error()
		}
		return se.Offset, se.Error()
	default:
		return 0, err.Error()
	}
}
