package sink_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// httpErr is what sinks/b2b's *HTTPError looks like to the classifier.
type httpErr struct {
	status int
	after  time.Duration
}

func (e *httpErr) Error() string             { return fmt.Sprintf("partner answered %d", e.status) }
func (e *httpErr) HTTPStatus() int           { return e.status }
func (e *httpErr) RetryAfter() time.Duration { return e.after }

func pgErr(code string) error {
	return fmt.Errorf("postgres sink: apply 3 records: %w", &pgconn.PgError{Code: code, Message: "m"})
}

func opErr(errno syscall.Errno) error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassify checks every generic row with an example error: its class
// and its name, so that a changed row fails here.
func TestClassify(t *testing.T) {
	t.Parallel()
	deadlineCtx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	cases := []struct {
		name  string
		err   error
		class sink.Class
		rule  string
		after time.Duration
	}{
		// Judged by the sink or the event model.
		{"permanent record", sink.Permanent("payload refused", pgErr("22P05")), sink.ClassPermanent, "permanent record error", 0},
		{"permanent wraps transient cause", fmt.Errorf("r: %w", sink.Permanent("x", context.DeadlineExceeded)), sink.ClassPermanent, "permanent record error", 0},
		{"invalid record", fmt.Errorf("x: %w", sink.ErrInvalidRecord), sink.ClassPermanent, "invalid record", 0},
		{"invalid event", &events.ValidationError{Field: "version", Reason: "is required"}, sink.ClassPermanent, "invalid event", 0},

		// HTTP.
		{"http 408", &httpErr{status: 408}, sink.ClassTransient, "http 408 request timeout", 0},
		{"http 425", &httpErr{status: 425}, sink.ClassTransient, "http 425 too early", 0},
		{"http 429 retry-after", fmt.Errorf("post: %w", &httpErr{status: 429, after: 7 * time.Second}), sink.ClassTransient, "http 429 too many requests", 7 * time.Second},
		{"http 500", &httpErr{status: 500}, sink.ClassTransient, "http 5xx server error", 0},
		{"http 502", &httpErr{status: 502}, sink.ClassTransient, "http 5xx server error", 0},
		{"http 503 retry-after", &httpErr{status: 503, after: time.Minute}, sink.ClassTransient, "http 5xx server error", time.Minute},
		{"http 504", &httpErr{status: 504}, sink.ClassTransient, "http 5xx server error", 0},
		{"http 400", &httpErr{status: 400}, sink.ClassPermanent, "http 400 bad request", 0},
		{"http 401", &httpErr{status: 401}, sink.ClassPermanent, "http 401 unauthorized", 0},
		{"http 403", &httpErr{status: 403}, sink.ClassPermanent, "http 403 forbidden", 0},
		{"http 404", &httpErr{status: 404}, sink.ClassPermanent, "http 404 not found", 0},
		{"http 410", &httpErr{status: 410}, sink.ClassPermanent, "http 410 gone", 0},
		{"http 422", &httpErr{status: 422}, sink.ClassPermanent, "http 422 unprocessable entity", 0},
		{"http 409", &httpErr{status: 409}, sink.ClassUnknown, "http other status", 0},
		{"http 413", &httpErr{status: 413}, sink.ClassPermanent, "http 413 content too large", 0},
		{"http 418", &httpErr{status: 418}, sink.ClassUnknown, "http other status", 0},
		{"http 302", &httpErr{status: 302}, sink.ClassUnknown, "http other status", 0},
		{"http status beats wrapped timeout", fmt.Errorf("%w: %w", &httpErr{status: 404}, context.DeadlineExceeded), sink.ClassPermanent, "http 404 not found", 0},

		// PostgreSQL.
		{"pg 40001", pgErr("40001"), sink.ClassTransient, "postgres 40001 serialization_failure", 0},
		{"pg 40P01", pgErr("40P01"), sink.ClassTransient, "postgres 40P01 deadlock_detected", 0},
		{"pg 55P03", pgErr("55P03"), sink.ClassTransient, "postgres 55P03 lock_not_available", 0},
		{"pg 57014", pgErr("57014"), sink.ClassTransient, "postgres 57014 query_canceled", 0},
		{"pg 57P01", pgErr("57P01"), sink.ClassTransient, "postgres 57P01 admin_shutdown", 0},
		{"pg 57P02", pgErr("57P02"), sink.ClassTransient, "postgres 57P02 crash_shutdown", 0},
		{"pg 57P03", pgErr("57P03"), sink.ClassTransient, "postgres 57P03 cannot_connect_now", 0},
		{"pg 08006", pgErr("08006"), sink.ClassTransient, "postgres class 08 connection exception", 0},
		{"pg 08001", pgErr("08001"), sink.ClassTransient, "postgres class 08 connection exception", 0},
		{"pg 53300", pgErr("53300"), sink.ClassTransient, "postgres class 53 insufficient resources", 0},
		{"pg 22P02", pgErr("22P02"), sink.ClassPermanent, "postgres class 22 data exception", 0},
		{"pg 22021", pgErr("22021"), sink.ClassPermanent, "postgres class 22 data exception", 0},
		{"pg 23505", pgErr("23505"), sink.ClassPermanent, "postgres class 23 integrity constraint violation", 0},
		{"pg 23502", pgErr("23502"), sink.ClassPermanent, "postgres class 23 integrity constraint violation", 0},
		{"pg 42P01 undefined table", pgErr("42P01"), sink.ClassUnknown, "unclassified", 0},
		{"pg 28P01 auth", pgErr("28P01"), sink.ClassUnknown, "unclassified", 0},
		{"pg connect error", pgConnectError(t), sink.ClassTransient, "postgres connect error", 0},
		{"pg safe to retry", safeToRetry{}, sink.ClassTransient, "postgres connection lost", 0},

		// Time and network.
		{"context deadline", fmt.Errorf("apply: %w", deadlineCtx.Err()), sink.ClassTransient, "deadline exceeded", 0},
		{"os deadline", os.ErrDeadlineExceeded, sink.ClassTransient, "deadline exceeded", 0},
		{"context canceled", fmt.Errorf("apply: %w", context.Canceled), sink.ClassTransient, "canceled", 0},
		{"net timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, sink.ClassTransient, "timeout", 0},
		{"connection refused", fmt.Errorf("dial: %w", opErr(syscall.ECONNREFUSED)), sink.ClassTransient, "connection refused", 0},
		{"connection reset", opErr(syscall.ECONNRESET), sink.ClassTransient, "connection reset", 0},
		{"broken pipe", opErr(syscall.EPIPE), sink.ClassTransient, "broken pipe", 0},
		{"eof", fmt.Errorf("read: %w", io.EOF), sink.ClassTransient, "connection closed", 0},
		{"unexpected eof", io.ErrUnexpectedEOF, sink.ClassTransient, "connection closed", 0},
		{"net closed", net.ErrClosed, sink.ClassTransient, "connection closed", 0},
		{"dns error", &net.DNSError{Err: "no such host", Name: "x"}, sink.ClassTransient, "network error", 0},
		{"retry-after on any row", &delayedErr{context.DeadlineExceeded, 3 * time.Second}, sink.ClassTransient, "deadline exceeded", 3 * time.Second},

		// Everything else.
		{"plain error", errors.New("mystery"), sink.ClassUnknown, "unclassified", 0},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := sink.Classify(nil, c.err)
			if got.Class != c.class || got.Rule != c.rule || got.RetryAfter != c.after {
				t.Errorf("Classify(%v) = {%s %q %v}, want {%s %q %v}", c.err, got.Class, got.Rule, got.RetryAfter, c.class, c.rule, c.after)
			}
		})
		seen[c.rule] = true
	}
	// Every row of the table has a case above.
	for _, r := range sink.Rules(nil) {
		if !seen[r.Name] {
			t.Errorf("classification rule %q has no test case", r.Name)
		}
	}
	if got := sink.Classify(nil, nil); got != (sink.Outcome{Class: sink.ClassUnknown}) {
		t.Errorf("Classify(nil) = %+v", got)
	}
}

type delayedErr struct {
	error
	after time.Duration
}

func (e *delayedErr) Unwrap() error             { return e.error }
func (e *delayedErr) RetryAfter() time.Duration { return e.after }

// errOwn is an error only ownSink knows.
var errOwn = errors.New("own error")

// ownSink is a sink with rows of its own (sink.Classifier).
type ownSink struct{ sink.Sink }

func (ownSink) ClassifyRules() []sink.Rule {
	return []sink.Rule{
		{Name: "own error", Class: sink.ClassTransient, Match: func(err error) bool { return errors.Is(err, errOwn) }},
		// Takes an error the generic rows would call transient.
		{Name: "own eof", Class: sink.ClassPermanent, Match: func(err error) bool { return errors.Is(err, io.EOF) }},
	}
}

// wrapper wraps a sink (sink.Wrapper), as a tracker of applied events does.
type wrapper struct{ inner sink.Sink }

func (w wrapper) Name() string { return w.inner.Name() }
func (w wrapper) Apply(ctx context.Context, b []sink.Record) ([]error, error) {
	return w.inner.Apply(ctx, b)
}
func (w wrapper) Unwrap() sink.Sink { return w.inner }

// bare neither has rows nor wraps.
type bare struct{ sink.Sink }

// A sink's rows come after the judged rows and before the generic ones,
// through any number of wrappers.
func TestClassifySinkRows(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]sink.Sink{"sink": ownSink{}, "wrapped": wrapper{ownSink{}}, "wrapped twice": wrapper{wrapper{ownSink{}}}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				err   error
				class sink.Class
				rule  string
			}{
				{fmt.Errorf("apply: %w", errOwn), sink.ClassTransient, "own error"},
				{fmt.Errorf("read: %w", io.EOF), sink.ClassPermanent, "own eof"},
				{sink.Permanent("refused", errOwn), sink.ClassPermanent, "permanent record error"},
				{fmt.Errorf("x: %w: %w", sink.ErrInvalidRecord, io.EOF), sink.ClassPermanent, "invalid record"},
				{pgErr("40P01"), sink.ClassTransient, "postgres 40P01 deadlock_detected"},
				{errors.New("mystery"), sink.ClassUnknown, "unclassified"},
			} {
				if got := sink.Classify(s, c.err); got.Class != c.class || got.Rule != c.rule {
					t.Errorf("Classify(%v) = %s by %q, want %s by %q", c.err, got.Class, got.Rule, c.class, c.rule)
				}
			}
			rules := sink.Rules(s)
			if len(rules) != len(sink.Rules(nil))+2 || rules[3].Name != "own error" || rules[4].Name != "own eof" {
				t.Errorf("Rules: the sink's two rows are not after the three judged ones")
			}
		})
	}
	// Without the sink, its errors fall to the generic rows.
	for _, s := range []sink.Sink{nil, bare{}, wrapper{bare{}}} {
		if got := sink.Classify(s, errOwn); got.Rule != "unclassified" {
			t.Errorf("%T: Classify(errOwn) = %+v, want unclassified", s, got)
		}
		if got := sink.Classify(s, io.EOF); got.Rule != "connection closed" {
			t.Errorf("%T: Classify(EOF) = %+v, want connection closed", s, got)
		}
	}
}

type safeToRetry struct{}

func (safeToRetry) Error() string     { return "conn closed before sending" }
func (safeToRetry) SafeToRetry() bool { return true }

// pgConnectError is a real *pgconn.ConnectError: a connection to a closed
// port.
func pgConnectError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pgconn.Connect(ctx, "postgres://x@"+addr+"/x?sslmode=disable&connect_timeout=2")
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("want a *pgconn.ConnectError, got %T %v", err, err)
	}
	return err
}

func TestClassString(t *testing.T) {
	t.Parallel()
	for c, want := range map[sink.Class]string{sink.ClassTransient: "transient", sink.ClassPermanent: "permanent", sink.ClassUnknown: "unknown", 0: "class(0)"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), want)
		}
	}
}
