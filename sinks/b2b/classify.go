package b2b

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
)

// Class is what the sink runtime does with an error from Apply.
type Class int

const (
	// ClassNone is Classify(nil): nothing to do.
	ClassNone Class = iota
	// ClassTransient: retry the batch with backoff (not before the wait of
	// a *RetryAfterError or an HTTPError.RetryAfter).
	ClassTransient
	// ClassPermanent: dead-letter the batch (or the record) with the error
	// as the reason; retrying fails the same way.
	ClassPermanent
)

func (c Class) String() string {
	switch c {
	case ClassNone:
		return "none"
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// classRule is one row of the classification table.
type classRule struct {
	name  string
	class Class
	match func(error) bool
}

// classTable is THE classification of B2B errors, first match wins; an
// error no row matches is transient. Every row is tested in
// TestClassifyTable.
//
// 400 and 422 for a batch of several events never reach the runtime: Apply
// bisects the batch and reports only the rejected events, as
// *sink.PermanentError. 401, 403, 404 and 410 concern the partner, not an
// event (wrong secret, endpoint gone): the whole batch is dead-lettered
// rather than retried forever, and an operator replays it after fixing the
// partner.
var classTable = []classRule{
	{"record rejected (sink.PermanentError)", ClassPermanent, func(err error) bool { return sink.IsPermanent(err) }},
	{"HTTP 400 Bad Request", ClassPermanent, status(http.StatusBadRequest)},
	{"HTTP 401 Unauthorized", ClassPermanent, status(http.StatusUnauthorized)},
	{"HTTP 403 Forbidden", ClassPermanent, status(http.StatusForbidden)},
	{"HTTP 404 Not Found", ClassPermanent, status(http.StatusNotFound)},
	{"HTTP 410 Gone", ClassPermanent, status(http.StatusGone)},
	{"HTTP 413 Content Too Large", ClassPermanent, status(http.StatusRequestEntityTooLarge)},
	{"HTTP 422 Unprocessable Entity", ClassPermanent, status(http.StatusUnprocessableEntity)},
	{"HTTP 408 Request Timeout", ClassTransient, status(http.StatusRequestTimeout)},
	{"HTTP 425 Too Early", ClassTransient, status(http.StatusTooEarly)},
	{"HTTP 429 Too Many Requests", ClassTransient, status(http.StatusTooManyRequests)},
	{"HTTP 5xx", ClassTransient, func(err error) bool {
		var he *HTTPError
		return errors.As(err, &he) && he.Status >= 500 && he.Status <= 599
	}},
	{"circuit breaker open", ClassTransient, is(ErrCircuitOpen)},
	{"partner Retry-After in force", ClassTransient, is(ErrRetryAfter)},
	{"partner disabled", ClassTransient, is(ErrPartnerDisabled)},
	{"partner not registered", ClassPermanent, is(ErrUnknownPartner)},
	{"secret cannot be decrypted", ClassTransient, is(ErrSecretKey)},
	{"timeout", ClassTransient, func(err error) bool {
		var ne net.Error
		return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	}},
	{"canceled", ClassTransient, is(context.Canceled)},
	{"connection refused", ClassTransient, is(syscall.ECONNREFUSED)},
	{"connection reset or closed", ClassTransient, func(err error) bool {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
			errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}},
	{"TLS certificate not trusted", ClassTransient, func(err error) bool {
		var ua x509.UnknownAuthorityError
		var ci x509.CertificateInvalidError
		var hn x509.HostnameError
		var cv *tls.CertificateVerificationError
		return errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &hn) || errors.As(err, &cv)
	}},
	{"other HTTP status (1xx, 3xx, other 4xx)", ClassTransient, func(err error) bool {
		var he *HTTPError
		return errors.As(err, &he)
	}},
}

func status(code int) func(error) bool {
	return func(err error) bool {
		var he *HTTPError
		return errors.As(err, &he) && he.Status == code
	}
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// Classify tells the sink runtime what to do with an error from Apply (a
// batch error) or a record error: retry or dead-letter. It follows
// classTable; an error it does not know is transient.
func Classify(err error) Class {
	c, _ := explain(err)
	return c
}

// explain is Classify plus the name of the matching row.
func explain(err error) (Class, string) {
	if err == nil {
		return ClassNone, ""
	}
	for _, r := range classTable {
		if r.match(err) {
			return r.class, r.name
		}
	}
	return ClassTransient, "unknown"
}

// MaxRetryAfterDefault caps a partner's Retry-After (Config.MaxRetryAfter).
const MaxRetryAfterDefault = time.Hour

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date, relative to now. Absent, unparsable or past → 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(MaxRetryAfterDefault/time.Second)*24 {
			n = int64(MaxRetryAfterDefault/time.Second) * 24
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return max(t.Sub(now), 0)
}
