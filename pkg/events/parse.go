package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"
)

// fieldNames lists the event fields, in the order error messages give them.
const fieldNames = "tenant, product_id, version, op, occurred_at, payload, idempotency_key, priority"

// Bits of parsed.seen.
const (
	seenTenant = 1 << iota
	seenProductID
	seenVersion
	seenOp
	seenOccurredAt
	seenPayload
	seenKey
	seenPriority
)

// parseEvent decodes one event object from raw, which must be valid JSON
// (callers check Valid first, so everything left to report is about the
// content). strict rejects unknown fields; field names are case-sensitive and
// may appear once. A null value counts as absent. The returned event does
// not alias raw. hasOccurredAt reports whether occurred_at was given.
func parseEvent(raw []byte, strict bool) (ev Event, hasOccurredAt bool, err error) {
	p := skipWS(raw, 0)
	if p >= len(raw) || raw[p] != '{' {
		kind := "nothing"
		if p < len(raw) {
			kind = jsonKind(raw[p])
		}
		return ev, false, invalid("", "an event must be a JSON object, got %s", kind)
	}
	p++
	var seen int
	for {
		p = skipWS(raw, p)
		if raw[p] == '}' {
			break
		}
		if raw[p] == ',' {
			p = skipWS(raw, p+1)
		}
		kEnd := valueEnd(raw, p)
		key, bit, err := field(raw[p:kEnd])
		if err != nil {
			return ev, false, invalid("", "bad field name: %v", err)
		}
		p = skipWS(raw, kEnd)
		p = skipWS(raw, p+1) // ':'
		vEnd := valueEnd(raw, p)
		val := raw[p:vEnd]
		p = vEnd

		if bit == 0 {
			if strict {
				return ev, false, invalid("", "unknown field %s (fields are case-sensitive: %s)", quote(key), fieldNames)
			}
			continue
		}
		if seen&bit != 0 {
			return ev, false, invalid(key, "appears more than once")
		}
		seen |= bit
		if val[0] == 'n' { // null: absent
			if bit == seenPayload {
				ev.Payload = json.RawMessage("null") // Validate says "must be a JSON object, got null"
			}
			continue
		}
		switch bit {
		case seenTenant:
			ev.Tenant, err = stringField(key, val)
		case seenProductID:
			ev.ProductID, err = stringField(key, val)
		case seenOp:
			switch string(val) { // the two ops without allocating
			case `"upsert"`:
				ev.Op = OpUpsert
			case `"delete"`:
				ev.Op = OpDelete
			default:
				var s string
				s, err = stringField(key, val)
				ev.Op = Op(s)
			}
		case seenKey:
			ev.IdempotencyKey, err = stringField(key, val)
		case seenPriority:
			var s string
			s, err = stringField(key, val)
			ev.Priority = Priority(s)
		case seenVersion:
			ev.Version, err = versionField(val)
		case seenOccurredAt:
			ev.OccurredAt, err = timeField(key, val)
			hasOccurredAt = true
		case seenPayload:
			ev.Payload = bytes.Clone(val)
		}
		if err != nil {
			return ev, false, err
		}
	}
	return ev, hasOccurredAt, nil
}

// fields are the event's fields and their bits.
var fields = [...]struct {
	name string
	bit  int
}{
	{"tenant", seenTenant}, {"product_id", seenProductID}, {"version", seenVersion}, {"op", seenOp},
	{"occurred_at", seenOccurredAt}, {"payload", seenPayload}, {"idempotency_key", seenKey},
	{"priority", seenPriority},
}

// field decodes a field name literal and returns the name and its bit (0:
// not an event field). A known name without escapes comes back as the
// constant, without allocating.
func field(lit []byte) (key string, bit int, err error) {
	if len(lit) >= 2 && bytes.IndexByte(lit, '\\') < 0 {
		name := lit[1 : len(lit)-1]
		for _, f := range fields {
			if string(name) == f.name {
				return f.name, f.bit, nil
			}
		}
		return string(name), 0, nil
	}
	if key, err = unquote(lit); err != nil {
		return "", 0, err
	}
	for _, f := range fields {
		if key == f.name {
			return f.name, f.bit, nil
		}
	}
	return key, 0, nil
}

func stringField(key string, val []byte) (string, error) {
	if val[0] != '"' {
		return "", invalid(key, "must be a string, got %s", jsonKind(val[0]))
	}
	s, err := unquote(val)
	if err != nil {
		return "", invalid(key, "is not a valid string: %v", err)
	}
	return s, nil
}

func versionField(val []byte) (int64, error) {
	if val[0] != '-' && (val[0] < '0' || val[0] > '9') {
		return 0, invalid("version", "must be an integer, got %s", jsonKind(val[0]))
	}
	v, err := strconv.ParseInt(string(val), 10, 64)
	if err == nil {
		return v, nil
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, invalid("version", "%s is out of range 1..%d", quote(string(val)), int64(math.MaxInt64))
	}
	return 0, invalid("version", "must be an integer, got %s", quote(string(val)))
}

func timeField(key string, val []byte) (time.Time, error) {
	if val[0] != '"' {
		return time.Time{}, invalid(key, "must be an RFC 3339 timestamp string, got %s", jsonKind(val[0]))
	}
	s, err := unquote(val)
	if err != nil {
		return time.Time{}, invalid(key, "is not a valid string: %v", err)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalid(key, "%s is not an RFC 3339 timestamp like 2024-05-01T12:00:00Z", quote(s))
	}
	return t, nil
}

// unquote decodes a JSON string literal; the fast path copies it.
func unquote(lit []byte) (string, error) {
	if len(lit) >= 2 && bytes.IndexByte(lit, '\\') < 0 {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

func skipWS(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '\n' || b[p] == '\r') {
		p++
	}
	return p
}

// valueEnd returns the index just past the JSON value that starts at b[p].
// b must be valid JSON.
func valueEnd(b []byte, p int) int {
	switch b[p] {
	case '"':
		for p++; p < len(b); p++ {
			switch b[p] {
			case '\\':
				p++
			case '"':
				return p + 1
			}
		}
		return p
	case '{', '[':
		depth := 0
		for ; p < len(b); p++ {
			switch b[p] {
			case '"':
				p = valueEnd(b, p) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return p + 1
				}
			}
		}
		return p
	default:
		for p < len(b) {
			switch b[p] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return p
			}
			p++
		}
		return p
	}
}
