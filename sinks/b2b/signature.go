package b2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request headers the sink sets on every POST.
const (
	// HeaderTimestamp carries the signing time in Unix seconds.
	HeaderTimestamp = "X-Fairway-Timestamp"
	// HeaderSignature carries "v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>".
	HeaderSignature = "X-Fairway-Signature"
	// HeaderIdempotencyKey is the same for every retry of the same events.
	HeaderIdempotencyKey = "Idempotency-Key"

	signatureVersion = "v1="
)

// VerifyToleranceDefault is a reasonable tolerance for Verify.
const VerifyToleranceDefault = 5 * time.Minute

// Sign returns the HeaderSignature value of body signed at ts with secret.
func Sign(secret []byte, ts time.Time, body []byte) string {
	return signatureVersion + hex.EncodeToString(mac(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify is what a partner runs on each request: it checks that
// HeaderSignature holds a v1 HMAC-SHA256 of HeaderTimestamp + "." + body
// under secret (compared in constant time), and that the timestamp is
// within tolerance of now (rejecting replays of old requests). header may
// hold several comma-separated v1= signatures (during a secret rotation);
// one match suffices. It returns nil, or an error wrapping ErrSignature or
// ErrStaleTimestamp.
func Verify(secret []byte, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	tsv := header.Get(HeaderTimestamp)
	ts, err := strconv.ParseInt(tsv, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is %q, want Unix seconds", ErrStaleTimestamp, HeaderTimestamp, tsv)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrStaleTimestamp, d.Truncate(time.Second), tolerance)
	}
	want := mac(secret, tsv, body)
	sigs := header.Get(HeaderSignature)
	if sigs == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, HeaderSignature)
	}
	for s := range strings.SplitSeq(sigs, ",") {
		hexSig, ok := strings.CutPrefix(strings.TrimSpace(s), signatureVersion)
		if !ok {
			continue
		}
		got, err := hex.DecodeString(hexSig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrSignature)
}
