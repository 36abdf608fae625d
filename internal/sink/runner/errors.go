package runner

import "errors"

var (
	// ErrConfig is wrapped by every error New returns for an invalid Config.
	ErrConfig = errors.New("sink runner: invalid config")
	// ErrPanic wraps a panic recovered from a sink's Apply.
	ErrPanic = errors.New("sink panicked")
	// ErrBadResult: a sink's Apply returned a per-record error slice of the
	// wrong length (a sink bug; classified unknown).
	ErrBadResult = errors.New("sink returned a malformed result")
)
