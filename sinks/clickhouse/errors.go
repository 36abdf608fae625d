package clickhouse

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// ErrConfig is wrapped by every error New returns for an invalid Config.
var ErrConfig = errors.New("clickhouse sink: invalid config")

// transientCodes are ClickHouse server error codes worth retrying: the
// server is overloaded or a resource is briefly unavailable, not wrong.
var transientCodes = map[int32]string{
	159: "TIMEOUT_EXCEEDED",
	164: "READONLY",
	202: "TOO_MANY_SIMULTANEOUS_QUERIES",
	203: "NO_FREE_CONNECTION",
	209: "SOCKET_TIMEOUT",
	210: "NETWORK_ERROR",
	241: "MEMORY_LIMIT_EXCEEDED",
	242: "TABLE_IS_READ_ONLY",
	252: "TOO_MANY_PARTS",
	319: "UNKNOWN_STATUS_OF_INSERT",
	999: "KEEPER_EXCEPTION",
}

// IsTransient reports whether a batch error from Apply is worth retrying:
// network and timeout errors, and the server codes above (too many parts,
// memory limit, too many queries, …). Other server exceptions (unknown
// table, syntax, authentication) need an operator.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var ex *ch.Exception
	if errors.As(err, &ex) {
		_, ok := transientCodes[ex.Code]
		return ok
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, ch.ErrAcquireConnTimeout),
		errors.As(err, &netErr):
		return true
	}
	return false
}

// ErrClosed is returned by Apply on a closed Sink, and to Apply calls still
// queued for a combined insert when the Sink is closed.
var ErrClosed = errors.New("clickhouse sink: closed")
