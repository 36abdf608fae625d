package b2b

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
)

func opErr(errno syscall.Errno) error {
	return &url.Error{Op: "Post", URL: "https://partner.example/hook", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
}

// TestClassifyTable checks every row of classTable with an example error,
// and that no row goes untested.
func TestClassifyTable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("b2b p1: tenant acme: POST https://x/hook: %w", err) }
	examples := map[string]struct {
		err  error
		want Class
	}{
		"record rejected (sink.PermanentError)":   {sink.Permanent("partner rejected the event", newHTTPError(503, 0, nil)), ClassPermanent},
		"HTTP 400 Bad Request":                    {newHTTPError(400, 0, nil), ClassPermanent},
		"HTTP 401 Unauthorized":                   {newHTTPError(401, 0, nil), ClassPermanent},
		"HTTP 403 Forbidden":                      {newHTTPError(403, 0, nil), ClassPermanent},
		"HTTP 404 Not Found":                      {newHTTPError(404, 0, nil), ClassPermanent},
		"HTTP 410 Gone":                           {newHTTPError(410, 0, nil), ClassPermanent},
		"HTTP 413 Content Too Large":              {newHTTPError(413, 0, nil), ClassPermanent},
		"HTTP 422 Unprocessable Entity":           {newHTTPError(422, 0, nil), ClassPermanent},
		"HTTP 408 Request Timeout":                {newHTTPError(408, 0, nil), ClassTransient},
		"HTTP 425 Too Early":                      {newHTTPError(425, 0, nil), ClassTransient},
		"HTTP 429 Too Many Requests":              {newHTTPError(429, 30*time.Second, nil), ClassTransient},
		"HTTP 5xx":                                {newHTTPError(502, 0, nil), ClassTransient},
		"circuit breaker open":                    {&RetryAfterError{Wait: time.Second, Err: ErrCircuitOpen}, ClassTransient},
		"partner Retry-After in force":            {&RetryAfterError{Wait: time.Second, Err: ErrRetryAfter}, ClassTransient},
		"partner disabled":                        {&RetryAfterError{Wait: time.Second, Err: ErrPartnerDisabled}, ClassTransient},
		"partner not registered":                  {ErrUnknownPartner, ClassPermanent},
		"secret cannot be decrypted":              {ErrSecretKey, ClassTransient},
		"timeout":                                 {context.DeadlineExceeded, ClassTransient},
		"canceled":                                {context.Canceled, ClassTransient},
		"connection refused":                      {opErr(syscall.ECONNREFUSED), ClassTransient},
		"connection reset or closed":              {opErr(syscall.ECONNRESET), ClassTransient},
		"TLS certificate not trusted":             {x509.UnknownAuthorityError{}, ClassTransient},
		"other HTTP status (1xx, 3xx, other 4xx)": {newHTTPError(409, 0, nil), ClassTransient},
	}
	seen := map[string]bool{}
	for _, r := range classTable {
		seen[r.name] = true
		t.Run(r.name, func(t *testing.T) {
			ex, ok := examples[r.name]
			if !ok {
				t.Fatalf("row %q has no example", r.name)
			}
			for _, err := range []error{ex.err, wrap(ex.err)} {
				c, row := explain(err)
				if c != ex.want || row != r.name {
					t.Errorf("explain(%v) = %v by %q, want %v by %q", err, c, row, ex.want, r.name)
				}
				if r.class != ex.want {
					t.Errorf("row %q is %v, example wants %v", r.name, r.class, ex.want)
				}
			}
		})
	}
	for name := range examples {
		if !seen[name] {
			t.Errorf("example %q has no row", name)
		}
	}
	// Not in the table: transient.
	for _, err := range []error{errors.New("something odd"), io.ErrClosedPipe} {
		if c, row := explain(err); c != ClassTransient || row != "unknown" {
			t.Errorf("explain(%v) = %v by %q, want transient by unknown", err, c, row)
		}
	}
	if Classify(nil) != ClassNone {
		t.Errorf("Classify(nil) = %v", Classify(nil))
	}
	if ClassTransient.String() != "transient" || ClassPermanent.String() != "permanent" {
		t.Error("Class.String")
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"-5", 0}, {"30", 30 * time.Second}, {" 30", 0}, {"1.5", 0}, {"soon", 0},
		{"Fri, 14 Mar 2025 15:10:26 GMT", time.Minute},
		{"Friday, 14-Mar-25 15:10:26 GMT", time.Minute}, // RFC 850
		{"Fri Mar 14 15:10:26 2025", time.Minute},       // asctime
		{"Fri, 14 Mar 2025 15:00:00 GMT", 0},            // past
		{"99999999999", 24 * MaxRetryAfterDefault},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestBreakerStates(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	b := &breaker{threshold: 2, coolDown: 10 * time.Second}
	step := func(o outcome) {
		t.Helper()
		if _, cause := b.allow(now, time.Second); cause != nil {
			t.Fatalf("allow: %v in state %v", cause, b.state)
		}
		b.record(now, o, 0)
	}
	step(outcomeFailure)
	step(outcomeSuccess) // resets the count
	step(outcomeFailure)
	if b.state != BreakerClosed {
		t.Fatalf("state %v after non-consecutive failures", b.state)
	}
	step(outcomeFailure)
	if wait, cause := b.allow(now, time.Second); b.state != BreakerOpen || cause != ErrCircuitOpen || wait != 10*time.Second {
		t.Fatalf("allow after %d failures = %s, %v (state %v)", 2, wait, cause, b.state)
	}
	now = now.Add(10 * time.Second)
	step(outcomeAbandoned) // the probe gave up: no verdict, the next call probes
	if b.state != BreakerHalfOpen || b.probing {
		t.Fatalf("after an abandoned probe: state %v probing %v", b.state, b.probing)
	}
	step(outcomeFailure)
	if b.state != BreakerOpen {
		t.Fatalf("failed probe: state %v", b.state)
	}
	now = now.Add(10 * time.Second)
	step(outcomeSuccess)
	if b.state != BreakerClosed || b.failures != 0 {
		t.Fatalf("good probe: state %v failures %d", b.state, b.failures)
	}
	b.record(now, outcomeFailure, time.Minute)
	if wait, cause := b.allow(now.Add(59*time.Second), time.Second); cause != ErrRetryAfter || wait != time.Second {
		t.Fatalf("Retry-After: %s %v", wait, cause)
	}
}

// TestRetryAfterErrorMatchesSinkCircuitOpen: the runtime tells an open
// circuit apart from other retries through sink.ErrCircuitOpen.
func TestRetryAfterErrorMatchesSinkCircuitOpen(t *testing.T) {
	t.Parallel()
	for cause, want := range map[error]bool{ErrCircuitOpen: true, ErrRetryAfter: false, ErrPartnerDisabled: false} {
		err := fmt.Errorf("b2b p: tenant t: %w", &RetryAfterError{Wait: time.Second, Endpoint: "http://x", Err: cause})
		if got := errors.Is(err, sink.ErrCircuitOpen); got != want {
			t.Errorf("%v: errors.Is(sink.ErrCircuitOpen) = %v, want %v", cause, got, want)
		}
		if !errors.Is(err, cause) {
			t.Errorf("%v no longer matches its own cause", cause)
		}
	}
}
