package b2b

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Signing is the scheme that signs a partner's requests (Partner.Signing,
// `fairway partners add --signing`). Both schemes sign with HMAC-SHA256
// under the partner's secret and send every retry of the same events with
// the same idempotency key and a fresh timestamp; during a secret rotation
// each request carries a signature under the new secret and one under the
// previous one. Sign, Verify and IdempotencyKey take any value other than
// SigningFairway for SigningStandard; the Registry stores only the two.
type Signing string

const (
	// SigningStandard is Standard Webhooks (https://www.standardwebhooks.com),
	// which any of its reference verifiers checks:
	//
	//	webhook-id: <idempotency key>
	//	webhook-timestamp: <unix seconds>
	//	webhook-signature: v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>
	//
	// Signatures are space-separated; the key is shared as "whsec_" +
	// base64(key) (WebhookSecret).
	SigningStandard Signing = "standard"
	// SigningFairway is fairway's own scheme, kept for partners that
	// verify it:
	//
	//	Idempotency-Key: <idempotency key>
	//	X-Fairway-Timestamp: <unix seconds>
	//	X-Fairway-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
	//
	// Signatures are comma-separated; the secret is shared as it is.
	SigningFairway Signing = "fairway"
	// SigningDefault is the scheme of a partner added without one.
	SigningDefault = SigningStandard
)

// Signings lists every scheme.
var Signings = []Signing{SigningStandard, SigningFairway}

// Request headers of the two schemes.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"

	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderTimestamp      = "X-Fairway-Timestamp"
	HeaderSignature      = "X-Fairway-Signature"
)

// Secret sizes.
const (
	// SecretMinBytes is the shortest secret a SigningFairway partner takes.
	SecretMinBytes = 16
	// WebhookSecretMinBytes is the shortest secret a SigningStandard
	// partner takes: the 24 bytes Standard Webhooks asks for.
	WebhookSecretMinBytes = 24
	// GeneratedSecretBytes is the size of a GenerateSecret secret.
	GeneratedSecretBytes = 32
	// WebhookSecretPrefix starts a secret in the Standard Webhooks form.
	WebhookSecretPrefix = "whsec_"
)

// VerifyToleranceDefault is a reasonable tolerance for Verify.
const VerifyToleranceDefault = 5 * time.Minute

// ParseSigning returns the scheme named s.
func ParseSigning(s string) (Signing, error) {
	if g := Signing(s); slices.Contains(Signings, g) {
		return g, nil
	}
	return "", fmt.Errorf("%w: signing %q, want one of %v", ErrInvalidPartner, s, Signings)
}

// secretMinBytes is the shortest secret the scheme takes.
func (s Signing) secretMinBytes() int {
	if s == SigningFairway {
		return SecretMinBytes
	}
	return WebhookSecretMinBytes
}

// ParseSecret reads a secret as the scheme shares it: "whsec_<base64>"
// for SigningStandard, the bytes as given for SigningFairway. The secret is
// never part of the error.
func (s Signing) ParseSecret(text string) (Secret, error) {
	if s == SigningFairway {
		return Secret(text), nil
	}
	b64, ok := strings.CutPrefix(text, WebhookSecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: a standard secret has the form %s<base64>", ErrInvalidPartner, WebhookSecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%w: the secret after %s is not standard base64", ErrInvalidPartner, WebhookSecretPrefix)
	}
	return Secret(key), nil
}

// WebhookSecret returns secret as Standard Webhooks shares it, "whsec_" +
// base64(secret): what a partner gives its verifier.
func WebhookSecret(secret []byte) string {
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(secret)
}

// GenerateSecret returns GeneratedSecretBytes random bytes.
func GenerateSecret() Secret {
	s := make(Secret, GeneratedSecretBytes)
	_, _ = rand.Read(s) // never fails (crypto/rand)
	return s
}

// Sign sets the scheme's headers on h for body sent at ts with the
// idempotency key id, with one signature per secret: the current secret
// first, then, during a rotation, the previous one.
func (s Signing) Sign(h http.Header, id string, ts time.Time, body []byte, secrets ...[]byte) {
	unix := strconv.FormatInt(ts.Unix(), 10)
	sigs := make([]string, len(secrets))
	for i, secret := range secrets {
		sigs[i] = s.signature(secret, id, unix, body)
	}
	if s == SigningFairway {
		h.Set(HeaderIdempotencyKey, id)
		h.Set(HeaderTimestamp, unix)
		h.Set(HeaderSignature, strings.Join(sigs, ","))
		return
	}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, unix)
	h.Set(HeaderWebhookSignature, strings.Join(sigs, " "))
}

// signature returns one signature: "v1=<hex>" or "v1,<base64>".
func (s Signing) signature(secret []byte, id, unix string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	if s != SigningFairway {
		m.Write([]byte(id))
		m.Write([]byte{'.'})
	}
	m.Write([]byte(unix))
	m.Write([]byte{'.'})
	m.Write(body)
	if s == SigningFairway {
		return "v1=" + hex.EncodeToString(m.Sum(nil))
	}
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// IdempotencyKey returns the request's idempotency key: webhook-id or
// Idempotency-Key.
func (s Signing) IdempotencyKey(h http.Header) string {
	if s == SigningFairway {
		return h.Get(HeaderIdempotencyKey)
	}
	return h.Get(HeaderWebhookID)
}

// Verify is what a partner runs on each request: it checks that one of
// the request's signatures is the scheme's HMAC-SHA256 of the request
// under secret (compared in constant time), and that the signed timestamp
// is within tolerance of now (rejecting replays of old requests). It
// returns nil, or an error wrapping ErrSignature or ErrStaleTimestamp.
// For SigningStandard, secret is the key: the bytes after "whsec_",
// base64-decoded.
func (s Signing) Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	tsHeader, sigHeader, sep := HeaderWebhookTimestamp, HeaderWebhookSignature, " "
	if s == SigningFairway {
		tsHeader, sigHeader, sep = HeaderTimestamp, HeaderSignature, ","
	}
	unix := h.Get(tsHeader)
	ts, err := strconv.ParseInt(unix, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is %q, want Unix seconds", ErrStaleTimestamp, tsHeader, unix)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrStaleTimestamp, d.Truncate(time.Second), tolerance)
	}
	id := h.Get(HeaderWebhookID)
	if s != SigningFairway && id == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, HeaderWebhookID)
	}
	sigs := h.Get(sigHeader)
	if sigs == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, sigHeader)
	}
	want := []byte(s.signature(secret, id, unix, body))
	for sig := range strings.SplitSeq(sigs, sep) {
		if hmac.Equal([]byte(strings.TrimSpace(sig)), want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrSignature)
}
