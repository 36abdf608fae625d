package clickhouse

import (
	"errors"
)

// ErrConfig is wrapped by every error New returns for an invalid Config.
var ErrConfig = errors.New("clickhouse sink: invalid config")

// ErrClosed is returned by Apply on a closed Sink, and to Apply calls still
// queued for a combined insert when the Sink is closed.
var ErrClosed = errors.New("clickhouse sink: closed")
