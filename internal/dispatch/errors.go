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
	// ErrStreamMovedBack: stream PRODUCTS went back under a running
	// dispatcher (recreated, or restored from an older backup), so what
	// it follows and indexes no longer matches the stream. Run stops with
	// it after its usual shutdown; run the dispatcher again (a supervisor
	// restarts it) to start over on the stream as it is. Pairs whose
	// cursors do not fit the stream are held (stream_reset.go).
	ErrStreamMovedBack = errors.New("dispatch: stream went back under the dispatcher")
)
