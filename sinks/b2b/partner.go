package b2b

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Defaults and bounds of a Partner's settings.
const (
	TimeoutDefault         = 10 * time.Second
	TimeoutMin             = 100 * time.Millisecond
	TimeoutMax             = 5 * time.Minute
	MaxRequestBytesDefault = 1 << 20
	MaxRequestBytesMin     = 1 << 10
	MaxRequestBytesMax     = 64 << 20
	// SecretOverlapDefault is how long the previous secret keeps signing
	// after `fairway partners rotate-secret`.
	SecretOverlapDefault = 24 * time.Hour
	// MaxEventsMax bounds Partner.MaxEvents.
	MaxEventsMax = 100_000
)

// Secret is a partner's signing secret. It formats as "[redacted]" with
// fmt, slog and encoding/json so that it cannot leak into logs or errors
// by accident; use []byte(s) where the bytes are needed.
type Secret []byte

const redacted = "[redacted]"

func (Secret) String() string               { return redacted }
func (Secret) GoString() string             { return redacted }
func (Secret) LogValue() slog.Value         { return slog.StringValue(redacted) }
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (s *Secret) UnmarshalJSON([]byte) error {
	return fmt.Errorf("%w: a secret is not read from JSON", ErrInvalidPartner)
}

// Partner is one tenant's settings for one B2B partner.
type Partner struct {
	// Tenant is the tenant id.
	Tenant string
	// Name is the partner name ([a-z0-9][a-z0-9_-]{0,62}); the destination
	// is "b2b:" + Name.
	Name string
	// URL receives the POSTs: https (http only with
	// RegistryConfig.AllowInsecureHTTP), with a host.
	URL string
	// Signing is the scheme the requests are signed with. Default
	// SigningDefault (SigningStandard); partners registered before there
	// was a choice have SigningFairway.
	Signing Signing
	// Secret signs the requests; at least SecretMinBytes for
	// SigningFairway, WebhookSecretMinBytes for SigningStandard.
	// Registry.List leaves it nil and sets SecretSet.
	Secret Secret
	// PreviousSecret signs every request as well, until
	// PreviousSecretUntil: a second signature that lets the partner move
	// to the new Secret without refusing a request (Registry.RotateSecret).
	// Registry.List leaves it nil.
	PreviousSecret Secret
	// PreviousSecretUntil is when PreviousSecret stops signing; zero when
	// there is none.
	PreviousSecretUntil time.Time
	// SecretSet reports that a secret is stored (List never returns it).
	SecretSet bool
	// SecretEncrypted reports that the stored secret is encrypted at rest.
	SecretEncrypted bool
	// Enabled: a disabled partner receives nothing; its batches wait
	// (Apply returns ErrPartnerDisabled, transient).
	Enabled bool
	// Timeout bounds one request. Default TimeoutDefault (10s), within
	// [TimeoutMin, TimeoutMax].
	Timeout time.Duration
	// MaxRequestBytes bounds one request body; a batch is split to fit.
	// Default MaxRequestBytesDefault (1 MiB), within [MaxRequestBytesMin,
	// MaxRequestBytesMax].
	MaxRequestBytes int
	// Ops, when not nil, are the only ops sent; other events count as
	// applied. nil sends all.
	Ops []events.Op
	// Transform filters the events the partner takes and gives each the
	// JSON the partner wants (Registry.SetTransform). Zero: every event,
	// as a BodyEvent.
	Transform Transform
	// MaxEvents bounds the events of one request: 1 sends each event on
	// its own; 0 (the default) leaves only MaxRequestBytes, in [0,
	// MaxEventsMax] (Registry.SetMaxEvents).
	MaxEvents int
	// RequestsPerSec is the most requests a second the partner takes (its
	// declared limit), across every sink replica; 0: no limit
	// (Registry.SetRequestRate).
	RequestsPerSec int

	CreatedAt, UpdatedAt time.Time
}

// String describes p without its secret and with its URL redacted (no
// query or user info, which may hold a token).
func (p Partner) String() string {
	s := fmt.Sprintf("partner %s/%s url=%s enabled=%v timeout=%s max_request_bytes=%d max_events=%d ops=%v signing=%s transform=%s secret=%s",
		p.Tenant, p.Name, redactURL(p.URL), p.Enabled, p.Timeout, p.MaxRequestBytes, p.MaxEvents, p.Ops, p.Signing, p.Transform.Kind(), map[bool]string{true: "set", false: "unset"}[p.SecretSet || len(p.Secret) > 0])
	if !p.PreviousSecretUntil.IsZero() {
		s += " previous_secret_until=" + p.PreviousSecretUntil.UTC().Format(time.RFC3339)
	}
	return s
}

// Format prints String for every verb, so %v, %+v and %#v never show the
// secret or a URL token.
func (p Partner) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(p.String())) }

// LogValue logs p as String does.
func (p Partner) LogValue() slog.Value { return slog.StringValue(p.String()) }

// RedactedURL returns the URL without query, fragment or user info.
func (p Partner) RedactedURL() string { return redactURL(p.URL) }

// Dest returns the destination name "b2b:<partner>".
func (p *Partner) Dest() string { return tenancy.DestB2BPrefix + p.Name }

// wants reports whether the partner takes events with op.
func (p *Partner) wants(op events.Op) bool { return p.Ops == nil || slices.Contains(p.Ops, op) }

// secrets returns the secrets that sign a request at now: Secret, then
// PreviousSecret until PreviousSecretUntil.
func (p *Partner) secrets(now time.Time) [][]byte {
	if p.PreviousSecret != nil && now.Before(p.PreviousSecretUntil) {
		return [][]byte{p.Secret, p.PreviousSecret}
	}
	return [][]byte{p.Secret}
}

// withDefaults fills zero Signing, Timeout and MaxRequestBytes.
func (p Partner) withDefaults() Partner {
	p.Signing = cmp.Or(p.Signing, SigningDefault)
	p.Timeout = cmp.Or(p.Timeout, TimeoutDefault)
	p.MaxRequestBytes = cmp.Or(p.MaxRequestBytes, MaxRequestBytesDefault)
	return p
}

// validate checks p. The secret is never part of an error.
func (p *Partner) validate(allowHTTP bool) error {
	if err := ValidPartnerName(p.Name); err != nil {
		return err
	}
	if err := events.ValidateTenant(p.Tenant); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPartner, err)
	}
	if err := validURL(p.URL, allowHTTP); err != nil {
		return err
	}
	if _, err := ParseSigning(string(p.Signing)); err != nil {
		return err
	}
	if n := p.Signing.secretMinBytes(); len(p.Secret) < n {
		return fmt.Errorf("%w: secret is %d bytes, want at least %d for %s signing", ErrInvalidPartner, len(p.Secret), n, p.Signing)
	}
	if p.Timeout < TimeoutMin || p.Timeout > TimeoutMax {
		return fmt.Errorf("%w: timeout %s not in [%s, %s]", ErrInvalidPartner, p.Timeout, TimeoutMin, TimeoutMax)
	}
	if p.MaxRequestBytes < MaxRequestBytesMin || p.MaxRequestBytes > MaxRequestBytesMax {
		return fmt.Errorf("%w: max request bytes %d not in [%d, %d]", ErrInvalidPartner, p.MaxRequestBytes, MaxRequestBytesMin, MaxRequestBytesMax)
	}
	if _, err := p.Transform.compile(); err != nil {
		return err
	}
	if p.MaxEvents < 0 || p.MaxEvents > MaxEventsMax {
		return fmt.Errorf("%w: max events %d not in [0, %d]", ErrInvalidPartner, p.MaxEvents, MaxEventsMax)
	}
	if p.Ops != nil {
		if len(p.Ops) == 0 {
			return fmt.Errorf("%w: ops is empty; use nil for all ops", ErrInvalidPartner)
		}
		for _, op := range p.Ops {
			if !op.Valid() {
				return fmt.Errorf("%w: op %q is not one of upsert, delete", ErrInvalidPartner, op)
			}
		}
	}
	return nil
}

// ValidPartnerName reports whether name is a valid partner name: the
// tenant-id rule ^[a-z0-9][a-z0-9_-]{0,62}$, so that "b2b:"+name is a valid
// destination.
func ValidPartnerName(name string) error {
	if tenancy.ValidDest(tenancy.DestB2BPrefix+name) != nil {
		return fmt.Errorf("%w: name %q (want ^[a-z0-9][a-z0-9_-]{0,62}$)", ErrInvalidPartner, name)
	}
	return nil
}

// validURL requires an absolute http(s) URL with a host; http only when
// allowed. The URL is not echoed in full: it may carry credentials.
func validURL(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: URL does not parse", ErrInvalidPartner)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowHTTP:
	case u.Scheme == "http":
		// Every command that takes RegistryConfig.AllowInsecureHTTP
		// (fairway partners add, sinks) names it --allow-insecure-http.
		return fmt.Errorf("%w: URL %s is http; https is required (--allow-insecure-http permits http, for local testing)", ErrInvalidPartner, redactURL(raw))
	default:
		return fmt.Errorf("%w: URL scheme %q, want https", ErrInvalidPartner, u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%w: URL %s has no host", ErrInvalidPartner, redactURL(raw))
	}
	return nil
}

// redactURL returns scheme://host/path of raw: no user info, no query, no
// fragment (either may hold a token).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable url>"
	}
	out := u.Scheme + "://" + u.Host + u.EscapedPath()
	if u.User != nil || u.RawQuery != "" {
		out += "?[redacted]"
	}
	return out
}

// endpoint returns scheme://host[:port] of raw: the circuit breaker key.
func endpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}
