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
	// RetryAfter is the delay the destination asked for (Delayed: an HTTP
	// Retry-After, an open circuit breaker); zero when it named none. The
	// runtime waits at least this long.
	RetryAfter time.Duration
}

// Rule is one row of a classification table: errors Match reports get
// Class, and Name in logs and dead letters.
type Rule struct {
	Name  string
	Class Class
	Match func(error) bool
}

// Classifier is implemented by a Sink whose errors need rows of their own:
// its destination's error codes, its own sentinel errors. Classify checks
// them after the rows for errors already judged (a PermanentError, an
// invalid record or event) and before the generic rows, so that a sink
// can name, or judge otherwise, an error the generic rows would take.
type Classifier interface {
	// ClassifyRules returns the sink's rows, first match first.
	ClassifyRules() []Rule
}

// Wrapper is implemented by a Sink that wraps another (one that counts or
// records what the wrapped sink applies): Classify looks through it for
// the wrapped sink's Classifier.
type Wrapper interface {
	Unwrap() Sink
}

// HTTPError is what an HTTP destination's error implements for the generic
// HTTP rows to recognise it without an import (sinks/b2b's *HTTPError).
// It may be returned as a batch error or as a per-record error, wrapped or
// not.
type HTTPError interface {
	error
	// HTTPStatus is the response's status code.
	HTTPStatus() int
}

// Delayed is implemented by an error that says how long the destination
// asked to be left alone (a parsed HTTP Retry-After, an open breaker's
// cool-down; 0: it did not say). Classify puts it in Outcome.RetryAfter
// whatever row matched.
type Delayed interface {
	error
	RetryAfter() time.Duration
}

// judged are the first rows: a record judged permanent by its sink stays
// permanent whatever it wraps.
var judged = []Rule{
	{"permanent record error", ClassPermanent, IsPermanent},
	{"invalid record", ClassPermanent, is(ErrInvalidRecord)},
	{"invalid event", ClassPermanent, is(events.ErrInvalidEvent)},
}

// generic are the last rows, for errors any sink may return. Order matters
// where an error can match two rows: an HTTP status beats the network
// error an HTTP client may wrap with it; a PostgreSQL code beats the time
// and network rows. PostgreSQL is generic because every sink may meet it:
// it holds the postgres sink's catalog and the B2B sink's partners.
var generic = []Rule{
	// HTTP destinations, through HTTPError. 400, 413 and 422 are about the
	// request's content: an HTTP sink bisects its batch on them to find
	// the events refused (sinks/b2b), and one that does not dead-letters
	// the batch.
	{"http 408 request timeout", ClassTransient, httpStatus(408)},
	{"http 425 too early", ClassTransient, httpStatus(425)},
	{"http 429 too many requests", ClassTransient, httpStatus(429)},
	{"http 5xx server error", ClassTransient, httpRange(500, 599)},
	{"http 400 bad request", ClassPermanent, httpStatus(400)},
	{"http 401 unauthorized", ClassPermanent, httpStatus(401)},
	{"http 403 forbidden", ClassPermanent, httpStatus(403)},
	{"http 404 not found", ClassPermanent, httpStatus(404)},
	{"http 410 gone", ClassPermanent, httpStatus(410)},
	{"http 413 content too large", ClassPermanent, httpStatus(413)},
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

// Classify classifies an error from s.Apply (a batch error or a per-record
// error), first match wins: the judged rows, s's own (Classifier, looked
// up through Wrappers; s may be nil), then the generic rows. An error no
// row matches is Unknown ("unclassified"). nil is not an error and
// classifies as Unknown with an empty rule; callers do not ask.
func Classify(s Sink, err error) Outcome {
	if err == nil {
		return Outcome{Class: ClassUnknown}
	}
	out := Outcome{Class: ClassUnknown, Rule: "unclassified"}
	if r, ok := match(err, judged, sinkRules(s), generic); ok {
		out = Outcome{Class: r.Class, Rule: r.Name}
	}
	var d Delayed
	if errors.As(err, &d) && d.RetryAfter() > 0 {
		out.RetryAfter = d.RetryAfter()
	}
	return out
}

func match(err error, tables ...[]Rule) (Rule, bool) {
	for _, t := range tables {
		for _, r := range t {
			if r.Match(err) {
				return r, true
			}
		}
	}
	return Rule{}, false
}

// sinkRules returns the rows of s, or of the sink it wraps.
func sinkRules(s Sink) []Rule {
	for s != nil {
		if c, ok := s.(Classifier); ok {
			return c.ClassifyRules()
		}
		w, ok := s.(Wrapper)
		if !ok {
			return nil
		}
		s = w.Unwrap()
	}
	return nil
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
