package events

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns wraps at most one of
// them, so callers classify with errors.Is.
var (
	// ErrInvalidEvent marks an event that breaks a rule of the event model.
	// The concrete error is a *ValidationError that names the field.
	ErrInvalidEvent = errors.New("invalid event")

	// ErrInvalidTenant marks a tenant id that is not a valid subject token.
	ErrInvalidTenant = errors.New("invalid tenant id")

	// ErrTenantMismatch marks an event whose tenant differs from the tenant
	// of the request that carried it (DecodeOptions.Tenant). It comes
	// wrapped in a *ValidationError, so it is also ErrInvalidEvent.
	ErrTenantMismatch = errors.New("tenant does not match the request")

	// ErrSubjectMismatch marks a stored event whose body names another
	// tenant or op than the subject it is stored on (CheckSubject). The
	// subject is what the NATS permissions allowed; the body is not
	// trusted over it.
	ErrSubjectMismatch = errors.New("event does not match its subject")

	// ErrMalformedJSON marks input that is not well-formed JSON: an NDJSON
	// line (an item error) or a JSON array body (fatal for the body).
	ErrMalformedJSON = errors.New("malformed JSON")

	// ErrTooManyEvents is returned by Decoder.Next when a body holds more
	// than DecodeOptions.MaxEvents events.
	ErrTooManyEvents = errors.New("too many events")

	// ErrUnsupportedContentType is returned by FormatFromContentType.
	ErrUnsupportedContentType = errors.New("unsupported content type")

	// ErrLineTooLong marks an NDJSON line (or a JSON array element) longer
	// than DecodeOptions.MaxLineBytes. It is an item error; decoding goes
	// on after the line.
	ErrLineTooLong = errors.New("line too long")

	// ErrInvalidRequestID marks a request id (ContextWithRequestID) that
	// cannot be carried in a NATS header.
	ErrInvalidRequestID = errors.New("invalid request id")

	// ErrInvalidConfig marks a bad StreamConfig or Publisher option.
	ErrInvalidConfig = errors.New("invalid configuration")
)

// ValidationError is one precise problem with one event. Its message reads
// as a sentence about the field, e.g. `version is required` or
// `op "upsrt" is not one of upsert, delete`.
//
// It is ErrInvalidEvent (errors.Is) and unwraps to Err when a more specific
// sentinel applies (ErrInvalidTenant, ErrTenantMismatch, ErrLineTooLong,
// ErrMalformedJSON).
type ValidationError struct {
	// Field is the JSON name of the offending field, or "" when the
	// problem is with the event as a whole (not an object, unknown field).
	Field string
	// Reason completes the sentence that starts with Field.
	Reason string
	// Err is an optional more specific sentinel.
	Err error
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + " " + e.Reason
}

// Is reports ErrInvalidEvent.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidEvent }

// Unwrap returns the more specific sentinel, if any.
func (e *ValidationError) Unwrap() error { return e.Err }

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ItemError is a per-item decoding problem, reported in Decoded.Err. Its
// message starts with where the item is: `line 3: version is required` for NDJSON,
// `element 2: ...` (0-based) for a JSON array. Use errors.As with
// *ValidationError to get the reason without the position.
type ItemError struct {
	Index int // 0-based position of the item among the items of the body
	Line  int // 1-based NDJSON line number, 0 for a JSON array
	Err   error
}

func (e *ItemError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("element %d: %v", e.Index, e.Err)
}

func (e *ItemError) Unwrap() error { return e.Err }

// quote quotes s for an error message: Go syntax, so control characters and
// invalid UTF-8 are escaped, and cut to a readable length.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q… (%d bytes)", s[:max], len(s))
	}
	return fmt.Sprintf("%q", s)
}
