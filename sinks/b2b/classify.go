package b2b

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
)

// classifyRules are the B2B sink's rows of the classification
// (sink.Classifier), ahead of the generic rows that judge the partner's
// HTTP answers (an *HTTPError is a sink.HTTPError: 408, 425, 429 and 5xx
// are transient; 400, 401, 403, 404, 410, 413 and 422 permanent; other
// statuses unknown), timeouts and connection errors.
//
// Some decisions are made in Apply, before any row: 400, 413 and 422 for
// a request of several events are bisected down to the events the
// partner refuses, each a *sink.PermanentError; so is every record of a
// tenant that has no such partner (ErrUnknownPartner), and an event too
// large on its own (ErrEventTooLarge).
var classifyRules = []sink.Rule{
	// Apply refused to call the partner, for a while: wait for it.
	{Name: "b2b circuit open", Class: sink.ClassTransient, Match: is(ErrCircuitOpen)},
	{Name: "b2b partner retry-after in force", Class: sink.ClassTransient, Match: is(ErrRetryAfter)},
	{Name: "b2b partner disabled", Class: sink.ClassTransient, Match: is(ErrPartnerDisabled)},
	// An operator's fix (FAIRWAY_SECRET_KEY, a CA) lets the same events
	// through: retried until the backoff gives up.
	{Name: "b2b partner secret cannot be decrypted", Class: sink.ClassTransient, Match: is(ErrSecretKey)},
	{Name: "tls certificate not trusted", Class: sink.ClassTransient, Match: func(err error) bool {
		var ua x509.UnknownAuthorityError
		var ci x509.CertificateInvalidError
		var hn x509.HostnameError
		var cv *tls.CertificateVerificationError
		return errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &hn) || errors.As(err, &cv)
	}},
}

// ClassifyRules implements sink.Classifier.
func (*Sink) ClassifyRules() []sink.Rule { return classifyRules }

var _ sink.Classifier = (*Sink)(nil)

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
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
