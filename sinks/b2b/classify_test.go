package b2b

import (
	"context"
	"crypto/tls"
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

// TestClassifyRules checks every row of the sink's classification with an
// example error, bare and wrapped as Apply wraps it, and that no row goes
// untested.
func TestClassifyRules(t *testing.T) {
	t.Parallel()
	var s *Sink // the rows do not need a sink
	wrap := func(err error) error { return fmt.Errorf("b2b p1: tenant acme: POST https://x/hook: %w", err) }
	examples := map[string]struct {
		err   error
		class sink.Class
		after time.Duration
	}{
		"b2b circuit open":                       {&RetryAfterError{Wait: time.Second, Err: ErrCircuitOpen}, sink.ClassTransient, time.Second},
		"b2b partner retry-after in force":       {&RetryAfterError{Wait: 2 * time.Second, Err: ErrRetryAfter}, sink.ClassTransient, 2 * time.Second},
		"b2b partner disabled":                   {&RetryAfterError{Wait: 5 * time.Second, Err: ErrPartnerDisabled}, sink.ClassTransient, 5 * time.Second},
		"b2b partner secret cannot be decrypted": {fmt.Errorf("%w: acme/p1: set FAIRWAY_SECRET_KEY", ErrSecretKey), sink.ClassTransient, 0},
		"tls certificate not trusted":            {&url.Error{Op: "Post", URL: "https://x", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, sink.ClassTransient, 0},
	}
	for _, r := range s.ClassifyRules() {
		t.Run(r.Name, func(t *testing.T) {
			ex, ok := examples[r.Name]
			if !ok {
				t.Fatalf("row %q has no example", r.Name)
			}
			for _, err := range []error{ex.err, wrap(ex.err)} {
				got := sink.Classify(s, err)
				if got.Class != ex.class || got.Rule != r.Name || got.RetryAfter != ex.after {
					t.Errorf("Classify(%v) = %+v, want %s by %q after %s", err, got, ex.class, r.Name, ex.after)
				}
			}
		})
		delete(examples, r.Name)
	}
	for name := range examples {
		t.Errorf("example %q has no row", name)
	}
}

// TestClassifyAnswers: what the runtime makes of the sink's errors that
// the generic rows judge, and of the record errors Apply decides.
func TestClassifyAnswers(t *testing.T) {
	t.Parallel()
	var s *Sink
	wrap := func(err error) error { return fmt.Errorf("b2b p1: tenant acme: POST https://x/hook: %w", err) }
	for _, c := range []struct {
		err   error
		class sink.Class
		rule  string
		after time.Duration
	}{
		{wrap(newHTTPError(400, 0, nil)), sink.ClassPermanent, "http 400 bad request", 0},
		{wrap(newHTTPError(401, 0, nil)), sink.ClassPermanent, "http 401 unauthorized", 0},
		{wrap(newHTTPError(403, 0, nil)), sink.ClassPermanent, "http 403 forbidden", 0},
		{wrap(newHTTPError(404, 0, nil)), sink.ClassPermanent, "http 404 not found", 0},
		{wrap(newHTTPError(410, 0, nil)), sink.ClassPermanent, "http 410 gone", 0},
		{wrap(newHTTPError(413, 0, nil)), sink.ClassPermanent, "http 413 content too large", 0},
		{wrap(newHTTPError(422, 0, nil)), sink.ClassPermanent, "http 422 unprocessable entity", 0},
		{wrap(newHTTPError(408, 0, nil)), sink.ClassTransient, "http 408 request timeout", 0},
		{wrap(newHTTPError(425, 0, nil)), sink.ClassTransient, "http 425 too early", 0},
		{wrap(newHTTPError(429, 30*time.Second, nil)), sink.ClassTransient, "http 429 too many requests", 30 * time.Second},
		{wrap(newHTTPError(503, time.Minute, nil)), sink.ClassTransient, "http 5xx server error", time.Minute},
		{wrap(newHTTPError(409, 0, nil)), sink.ClassUnknown, "http other status", 0},
		{wrap(newHTTPError(302, 0, nil)), sink.ClassUnknown, "http other status", 0},
		{wrap(context.DeadlineExceeded), sink.ClassTransient, "deadline exceeded", 0},
		{wrap(opErr(syscall.ECONNREFUSED)), sink.ClassTransient, "connection refused", 0},
		{wrap(opErr(syscall.ECONNRESET)), sink.ClassTransient, "connection reset", 0},
		{wrap(io.ErrUnexpectedEOF), sink.ClassTransient, "connection closed", 0},
		{sink.Permanent("tenant acme has no partner p1", wrap(ErrUnknownPartner)), sink.ClassPermanent, "permanent record error", 0},
		{sink.Permanent("partner rejected the event", newHTTPError(413, 0, nil)), sink.ClassPermanent, "permanent record error", 0},
		{sink.Permanent("event too large", ErrEventTooLarge), sink.ClassPermanent, "permanent record error", 0},
		{errors.New("something odd"), sink.ClassUnknown, "unclassified", 0},
	} {
		if got := sink.Classify(s, c.err); got.Class != c.class || got.Rule != c.rule || got.RetryAfter != c.after {
			t.Errorf("Classify(%v) = %+v, want %s by %q after %s", c.err, got, c.class, c.rule, c.after)
		}
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
