package sink

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	chproto "github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Class is what the sink runtime does with a failure.
type Class int

const (
	// ClassTransient failures are retried with jittered exponential backoff,
	// holding the tenant's slot, until the backoff's max elapsed time.
	ClassTransient Class = iota + 1
	// ClassPermanent failures are dead-lettered at once: the same data fails the
	// same way on every retry.
	ClassPermanent
	// ClassUnknown failures are retried like transient ones until the runtime's
	// attempt limit, then dead-lettered.
	ClassUnknown
)

// String returns "transient", "permanent" or "unknown"; the dead-letter
// class header and the metrics' class label use it.
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	case ClassUnknown:
		return "unknown"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Outcome is the classification of one error.
type Outcome struct {
	Class Class
	// Rule names the row of the classification table that matched, e.g.
	// "postgres 40P01 deadlock_detected". Logs and dead letters carry it.
	Rule string
	// RetryAfter is the delay the destination asked for (HTTP Retry-After);
	// zero when it named none. The runtime waits at least this long.
	RetryAfter time.Duration
}

// HTTPError is what an HTTP destination's error implements for Classify to
// recognise it without an import: sinks/b2b's error type has these two
// methods (HTTPStatus is the response status; RetryAfter the parsed
// Retry-After header, 0 if absent). It may be returned as a batch error or
// as a per-record error, wrapped or not.
type HTTPError interface {
	error
	HTTPStatus() int
	RetryAfter() time.Duration
}

// rule is one row of the classification table.
type rule struct {
	name  string
	class Class
	match func(error) bool
}

// table is the whole classification, first match wins. Anything it does
// not match is Unknown ("unclassified"). Order matters where an error can
// match two rows: a record already judged permanent by its sink stays
// permanent whatever it wraps; an HTTP status beats the network error an
// HTTP client may wrap with it; a PostgreSQL or ClickHouse code beats the
// generic context and network rows.
var table = []rule{
	// Judged by the sink or by the event model.
	{"permanent record error", ClassPermanent, IsPermanent},
	{"invalid record", ClassPermanent, is(ErrInvalidRecord)},
	{"invalid event", ClassPermanent, is(events.ErrInvalidEvent)},

	// HTTP destinations (sinks/b2b), through HTTPError.
	{"http 408 request timeout", ClassTransient, httpStatus(408)},
	{"http 425 too early", ClassTransient, httpStatus(425)},
	{"http 429 too many requests", ClassTransient, httpStatus(429)},
	{"http 5xx server error", ClassTransient, httpRange(500, 599)},
	{"http 400 bad request", ClassPermanent, httpStatus(400)},
	{"http 401 unauthorized", ClassPermanent, httpStatus(401)},
	{"http 403 forbidden", ClassPermanent, httpStatus(403)},
	{"http 404 not found", ClassPermanent, httpStatus(404)},
	{"http 410 gone", ClassPermanent, httpStatus(410)},
	{"http 422 unprocessable entity", ClassPermanent, httpStatus(422)},
	{"http other status", ClassUnknown, httpRange(0, 999)},

	// PostgreSQL, by SQLSTATE.
	{"postgres 40001 serialization_failure", ClassTransient, pgCode("40001")},
	{"postgres 40P01 deadlock_detected", ClassTransient, pgCode("40P01")},
	{"postgres 55P03 lock_not_available", ClassTransient, pgCode("55P03")},
	{"postgres 57014 query_canceled", ClassTransient, pgCode("57014")},
	{"postgres 57P01 admin_shutdown", ClassTransient, pgCode("57P01")},
	{"postgres 57P02 crash_shutdown", ClassTransient, pgCode("57P02")},
	{"postgres 57P03 cannot_connect_now", ClassTransient, pgCode("57P03")},
	{"postgres class 08 connection exception", ClassTransient, pgClass("08")},
	{"postgres class 53 insufficient resources", ClassTransient, pgClass("53")},
	{"postgres class 22 data exception", ClassPermanent, pgClass("22")},
	{"postgres class 23 integrity constraint violation", ClassPermanent, pgClass("23")},
	{"postgres connect error", ClassTransient, as[*pgconn.ConnectError]},
	{"postgres connection lost", ClassTransient, pgconn.SafeToRetry},

	// ClickHouse server exceptions, by code.
	{"clickhouse 159 TIMEOUT_EXCEEDED", ClassTransient, chCode(159)},
	{"clickhouse 164 READONLY", ClassTransient, chCode(164)},
	{"clickhouse 202 TOO_MANY_SIMULTANEOUS_QUERIES", ClassTransient, chCode(202)},
	{"clickhouse 203 NO_FREE_CONNECTION", ClassTransient, chCode(203)},
	{"clickhouse 209 SOCKET_TIMEOUT", ClassTransient, chCode(209)},
	{"clickhouse 210 NETWORK_ERROR", ClassTransient, chCode(210)},
	{"clickhouse 241 MEMORY_LIMIT_EXCEEDED", ClassTransient, chCode(241)},
	{"clickhouse 242 TABLE_IS_READ_ONLY", ClassTransient, chCode(242)},
	{"clickhouse 252 TOO_MANY_PARTS", ClassTransient, chCode(252)},
	{"clickhouse 319 UNKNOWN_STATUS_OF_INSERT", ClassTransient, chCode(319)},
	{"clickhouse 999 KEEPER_EXCEPTION", ClassTransient, chCode(999)},

	// Time and the network, whoever reports them.
	{"deadline exceeded", ClassTransient, func(err error) bool {
		return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
	}},
	{"canceled", ClassTransient, is(context.Canceled)},
	{"timeout", ClassTransient, func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}},
	{"connection refused", ClassTransient, is(syscall.ECONNREFUSED)},
	{"connection reset", ClassTransient, is(syscall.ECONNRESET)},
	{"broken pipe", ClassTransient, is(syscall.EPIPE)},
	{"connection closed", ClassTransient, func(err error) bool {
		return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
	}},
	{"network error", ClassTransient, func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne)
	}},
}

// Classify classifies an error from Sink.Apply (a batch error or a
// per-record error) with the table above. nil is not an error and
// classifies as Unknown with an empty rule; callers do not ask.
func Classify(err error) Outcome {
	if err == nil {
		return Outcome{Class: ClassUnknown}
	}
	out := Outcome{Class: ClassUnknown, Rule: "unclassified"}
	for _, r := range table {
		if r.match(err) {
			out = Outcome{Class: r.class, Rule: r.name}
			break
		}
	}
	var he HTTPError
	if errors.As(err, &he) && he.RetryAfter() > 0 {
		out.RetryAfter = he.RetryAfter()
	}
	return out
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func as[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}

func httpStatus(code int) func(error) bool { return httpRange(code, code) }

func httpRange(lo, hi int) func(error) bool {
	return func(err error) bool {
		var he HTTPError
		if !errors.As(err, &he) {
			return false
		}
		s := he.HTTPStatus()
		return s >= lo && s <= hi
	}
}

func pgCode(code string) func(error) bool {
	return func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == code
	}
}

func pgClass(class string) func(error) bool {
	return func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && len(pe.Code) == 5 && pe.Code[:2] == class
	}
}

func chCode(code int32) func(error) bool {
	return func(err error) bool {
		var ex *chproto.Exception
		return errors.As(err, &ex) && ex.Code == code
	}
}

// ClassifyRules returns the names of the table's rows in order, for
// documentation and for the test that every row has a case.
func ClassifyRules() []string {
	out := make([]string, len(table))
	for i, r := range table {
		out[i] = r.name
	}
	return out
}
