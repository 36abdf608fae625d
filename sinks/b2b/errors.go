package b2b

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fairwayhq/fairway/internal/sink"
)

var (
	// ErrConfig is wrapped by every error New and NewRegistry return for an
	// invalid Config or RegistryConfig.
	ErrConfig = errors.New("b2b: invalid config")
	// ErrInvalidPartner is wrapped by Registry errors for a partner that
	// breaks a rule (name, URL, secret, timeout, size, ops).
	ErrInvalidPartner = errors.New("b2b: invalid partner")
	// ErrPartnerExists is returned by Registry.Add for a (tenant, partner)
	// pair that is already registered.
	ErrPartnerExists = errors.New("b2b: partner exists")
	// ErrUnknownPartner is returned by the Registry for a (tenant, partner)
	// pair that is not registered. The sink reports the records of such a
	// tenant as permanent, wrapping it.
	ErrUnknownPartner = errors.New("b2b: unknown partner")
	// ErrUnknownTenant is returned by Registry.Add when the tenant does not
	// exist in fairway.tenants.
	ErrUnknownTenant = errors.New("b2b: unknown tenant")
	// ErrSecretKey means a stored secret is encrypted and the registry has
	// no key, or the wrong key, to decrypt it (see FAIRWAY_SECRET_KEY).
	ErrSecretKey = errors.New("b2b: partner secret cannot be decrypted")
	// ErrPartnerDisabled is wrapped by the (transient) *RetryAfterError
	// Apply returns for a tenant whose partner is disabled: deliveries wait
	// until it is enabled.
	ErrPartnerDisabled = errors.New("b2b: partner disabled")
	// ErrCircuitOpen is wrapped by the *RetryAfterError Apply returns,
	// without making a request, while the partner's circuit breaker is open.
	ErrCircuitOpen = errors.New("b2b: circuit open")
	// ErrRetryAfter is wrapped by the *RetryAfterError Apply returns, without
	// making a request, while a partner's Retry-After is in force.
	ErrRetryAfter = errors.New("b2b: partner asked to retry later")
	// ErrEventTooLarge is wrapped by the *sink.PermanentError of a record
	// whose encoding alone exceeds the partner's max request size.
	ErrEventTooLarge = errors.New("b2b: event larger than the partner's max request size")
	// ErrInvalidTransform is wrapped by the error for a Transform whose
	// expressions do not compile; the message is CEL's.
	ErrInvalidTransform = errors.New("b2b: invalid transform")
	// ErrTransform is wrapped by the *sink.PermanentError of a record the
	// partner's filter or map failed on; the message is CEL's.
	ErrTransform = errors.New("b2b: transform failed")
	// ErrSignature is returned by Signing.Verify for a missing, malformed
	// or wrong signature.
	ErrSignature = errors.New("b2b: bad signature")
	// ErrStaleTimestamp is returned by Signing.Verify when the signed
	// timestamp is further from now than the tolerance (a replayed request).
	ErrStaleTimestamp = errors.New("b2b: stale or missing signature timestamp")
)

// MaxErrorBody bounds HTTPError.Body.
const MaxErrorBody = 512

// HTTPError is a partner's non-2xx answer.
type HTTPError struct {
	// Status is the HTTP status code.
	Status int
	// Wait is the partner's Retry-After (seconds or HTTP-date) as a
	// duration from when the answer arrived, capped by
	// Config.MaxRetryAfter; 0 when absent or unparsable. (The method
	// RetryAfter returns it, for internal/sink.Delayed.)
	Wait time.Duration
	// Body is the start of the response body, at most MaxErrorBody bytes,
	// made valid UTF-8.
	Body string
	// Truncated reports that the body was longer than Body.
	Truncated bool
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "partner answered %d %s", e.Status, http.StatusText(e.Status))
	if e.Wait > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.Wait)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %q", e.Body)
		if e.Truncated {
			b.WriteString(" (truncated)")
		}
	}
	return b.String()
}

// HTTPStatus returns Status (internal/sink.HTTPError).
func (e *HTTPError) HTTPStatus() int { return e.Status }

// RetryAfter returns Wait (internal/sink.Delayed).
func (e *HTTPError) RetryAfter() time.Duration { return e.Wait }

// newHTTPError keeps at most MaxErrorBody bytes of body.
func newHTTPError(status int, retryAfter time.Duration, body []byte) *HTTPError {
	e := &HTTPError{Status: status, Wait: retryAfter}
	if len(body) > MaxErrorBody {
		body, e.Truncated = body[:MaxErrorBody], true
	}
	s := strings.ToValidUTF8(string(body), string(utf8.RuneError))
	for len(s) > MaxErrorBody { // replacement characters are 3 bytes
		_, n := utf8.DecodeLastRuneInString(s)
		s, e.Truncated = s[:len(s)-n], true
	}
	e.Body = s
	return e
}

// RetryAfterError is returned by Apply, without making a request, while the
// partner may not be called: its circuit breaker is open (errors.Is
// ErrCircuitOpen), its Retry-After is in force (errors.Is ErrRetryAfter) or
// it is disabled (errors.Is ErrPartnerDisabled).
// Wait is how long until a call is allowed again; a runtime should not
// retry sooner.
type RetryAfterError struct {
	Wait time.Duration
	// Endpoint is the partner endpoint (scheme://host[:port]).
	Endpoint string
	// Err is ErrCircuitOpen, ErrRetryAfter or ErrPartnerDisabled.
	Err error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v: %s: next call in %s", e.Err, e.Endpoint, e.Wait)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// Is makes an open circuit match internal/sink.ErrCircuitOpen too, so the
// sink runtime can say that work waits for the partner's breaker.
func (e *RetryAfterError) Is(target error) bool {
	return target == sink.ErrCircuitOpen && errors.Is(e.Err, ErrCircuitOpen)
}

// RetryAfter returns Wait (internal/sink.Delayed): the runtime retries no
// sooner.
func (e *RetryAfterError) RetryAfter() time.Duration { return e.Wait }
