package scheduler

import "errors"

var (
	// ErrInvalidConfig is returned by New when a Config field is out of
	// range. The wrapping error names the field.
	ErrInvalidConfig = errors.New("scheduler: invalid config")

	// ErrNoGrant is returned by Done for a key that has no grant
	// outstanding: Done without Next, Done twice, or Done after Remove.
	ErrNoGrant = errors.New("scheduler: no grant outstanding")
)
