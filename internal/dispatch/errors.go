package dispatch

import "errors"

var (
	// ErrInvalidConfig: a Config field or a dependency is missing or out of
	// range. The wrapping error names it.
	ErrInvalidConfig = errors.New("dispatch: invalid config")
	// ErrPublish: a work item could not be handed to stream WORK within
	// Config.PublishTimeout. Its batch is handed back (tenancy.ReturnBatches)
	// and re-dispatched.
	ErrPublish = errors.New("dispatch: publish work item")
)
