package sink

import (
	"errors"
	"fmt"
)

// ErrInvalidRecord is wrapped by the PermanentErrors a sink produces from its
// own validation of a record (as opposed to a rejection by the destination).
var ErrInvalidRecord = errors.New("invalid record")

// ErrCircuitOpen is matched (errors.Is) by the error a sink returns, without
// calling its destination, while the destination's circuit breaker is open
// (sinks/b2b's *RetryAfterError). The runtime retries it like any transient
// error and reports the wait as "circuit open" rather than "retrying".
var ErrCircuitOpen = errors.New("destination circuit open")

// PermanentError marks a record-level problem caused by the event itself: it
// will fail the same way on every retry, so the runtime dead-letters it with
// Reason. Anything else is for the runtime's classifier.
type PermanentError struct {
	// Reason is a short, stable, human-readable cause ("payload is not
	// valid jsonb", "occurred_at out of range").
	Reason string
	// Err is the underlying error, if any (a *pgconn.PgError, say).
	Err error
}

// Permanent returns a *PermanentError with reason wrapping err.
func Permanent(reason string, err error) *PermanentError {
	return &PermanentError{Reason: reason, Err: err}
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent: " + e.Reason
	}
	return fmt.Sprintf("permanent: %s: %v", e.Reason, e.Err)
}

func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err is, or wraps, a *PermanentError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}
