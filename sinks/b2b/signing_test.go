package b2b_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("partner-secret-0123456789abcdef")
	old := []byte("old-secret-xxxxxxxxxxxxxxxxxxxxx")
	body := []byte(`{"tenant":"acme","partner":"p1","events":[]}`)
	at := time.Unix(1_700_000_000, 0)
	const id = "fw1-00112233445566778899aabbccddeeff"
	tol := 5 * time.Minute
	for _, g := range b2b.Signings {
		signed := func(ts time.Time, secrets ...[]byte) http.Header {
			h := http.Header{}
			g.Sign(h, id, ts, body, secrets...)
			return h
		}
		tsHeader, sigHeader := b2b.HeaderWebhookTimestamp, b2b.HeaderWebhookSignature
		if g == b2b.SigningFairway {
			tsHeader, sigHeader = b2b.HeaderTimestamp, b2b.HeaderSignature
		}
		with := func(h http.Header, name, value string) http.Header {
			h = h.Clone()
			if value == "" {
				h.Del(name)
			} else {
				h.Set(name, value)
			}
			return h
		}
		good := signed(at, secret)
		for _, tc := range []struct {
			name   string
			header http.Header
			body   []byte
			now    time.Time
			want   error
		}{
			{"Good", good, body, at.Add(time.Minute), nil},
			{"GoodClockBehind", good, body, at.Add(-time.Minute), nil},
			{"TamperedBody", good, []byte(`{"tenant":"evil","partner":"p1","events":[]}`), at, b2b.ErrSignature},
			{"WrongSecret", signed(at, []byte("another-secret-entirely-0123456")), body, at, b2b.ErrSignature},
			{"Stale", good, body, at.Add(tol + time.Second), b2b.ErrStaleTimestamp},
			{"Future", good, body, at.Add(-tol - time.Second), b2b.ErrStaleTimestamp},
			{"TamperedTimestamp", with(good, tsHeader, "1700000001"), body, at, b2b.ErrSignature},
			{"NoTimestamp", with(good, tsHeader, ""), body, at, b2b.ErrStaleTimestamp},
			{"NoSignature", with(good, sigHeader, ""), body, at, b2b.ErrSignature},
			{"OtherVersionOnly", with(good, sigHeader, strings.Replace(good.Get(sigHeader), "v1", "v0", 1)), body, at, b2b.ErrSignature},
			{"RotationNewMatches", signed(at, secret, old), body, at, nil},
			{"RotationOldMatches", signed(at, old, secret), body, at, nil},
			{"RotationNeitherMatches", signed(at, old, []byte("third-secret-xxxxxxxxxxxxxxxxxx")), body, at, b2b.ErrSignature},
		} {
			t.Run(string(g)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				err := g.Verify(secret, tc.header, tc.body, tc.now, tol)
				if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("Verify = %v, want %v", err, tc.want)
				}
			})
		}
	}
	// Standard Webhooks signs the id: another id does not verify.
	h := http.Header{}
	b2b.SigningStandard.Sign(h, id, at, body, secret)
	h.Set(b2b.HeaderWebhookID, "fw1-ffffffffffffffffffffffffffffffff")
	if err := b2b.SigningStandard.Verify(secret, h, body, at, tol); !errors.Is(err, b2b.ErrSignature) {
		t.Fatalf("standard Verify with a changed webhook-id = %v, want ErrSignature", err)
	}
}

// TestSignHeaders pins each scheme's headers and signature format, with
// the separator of a rotation's two signatures.
func TestSignHeaders(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		signing        b2b.Signing
		want, notWant  []string
		sigPrefix, sep string
	}{
		{b2b.SigningStandard, []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"},
			[]string{b2b.HeaderIdempotencyKey, b2b.HeaderTimestamp, b2b.HeaderSignature}, "v1,", " "},
		{b2b.SigningFairway, []string{b2b.HeaderIdempotencyKey, b2b.HeaderTimestamp, b2b.HeaderSignature},
			[]string{b2b.HeaderWebhookID, b2b.HeaderWebhookTimestamp, b2b.HeaderWebhookSignature}, "v1=", ","},
	} {
		h := http.Header{}
		tc.signing.Sign(h, "fw1-id", at, []byte("{}"), []byte("current-secret-0123456789abcdef"), []byte("previous-secret-0123456789abcde"))
		for _, k := range tc.want {
			if h.Get(k) == "" {
				t.Errorf("%s: no %s in %v", tc.signing, k, h)
			}
		}
		for _, k := range tc.notWant {
			if h.Get(k) != "" {
				t.Errorf("%s: %s is set: %v", tc.signing, k, h)
			}
		}
		if got := tc.signing.IdempotencyKey(h); got != "fw1-id" {
			t.Errorf("%s: IdempotencyKey = %q", tc.signing, got)
		}
		sigs := strings.Split(h.Get(tc.want[2]), tc.sep)
		if len(sigs) != 2 || sigs[0] == sigs[1] || !strings.HasPrefix(sigs[0], tc.sigPrefix) || !strings.HasPrefix(sigs[1], tc.sigPrefix) {
			t.Errorf("%s: signatures %q, want two %q… separated by %q", tc.signing, h.Get(tc.want[2]), tc.sigPrefix, tc.sep)
		}
		if h.Get(tc.want[1]) != "1700000000" {
			t.Errorf("%s: timestamp %q", tc.signing, h.Get(tc.want[1]))
		}
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	key := b2b.GenerateSecret()
	if len(key) != b2b.GeneratedSecretBytes || bytes.Equal(key, b2b.GenerateSecret()) {
		t.Fatalf("GenerateSecret gave %d bytes, or the same twice", len(key))
	}
	whsec := b2b.WebhookSecret(key)
	for _, tc := range []struct {
		signing b2b.Signing
		text    string
		want    []byte // nil: an error
	}{
		{b2b.SigningStandard, whsec, key},
		{b2b.SigningStandard, "whsec_c2hvcnQ=", []byte("short")}, // parses; Registry refuses the length
		{b2b.SigningStandard, strings.TrimPrefix(whsec, "whsec_"), nil},
		{b2b.SigningStandard, "plain-secret-without-a-prefix", nil},
		{b2b.SigningStandard, "whsec_not base64!", nil},
		{b2b.SigningFairway, "plain-secret-without-a-prefix", []byte("plain-secret-without-a-prefix")},
		{b2b.SigningFairway, whsec, []byte(whsec)},
	} {
		got, err := tc.signing.ParseSecret(tc.text)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%s ParseSecret(%q) = %x, want an error", tc.signing, tc.text, got)
		case tc.want == nil && (!errors.Is(err, b2b.ErrInvalidPartner) || strings.Contains(err.Error(), tc.text)):
			t.Errorf("%s ParseSecret(%q): error %v, want ErrInvalidPartner without the secret", tc.signing, tc.text, err)
		case tc.want != nil && (err != nil || !bytes.Equal(got, tc.want)):
			t.Errorf("%s ParseSecret(%q) = %x, %v; want %x", tc.signing, tc.text, got, err, tc.want)
		}
	}
	if _, err := b2b.ParseSigning("svix"); !errors.Is(err, b2b.ErrInvalidPartner) {
		t.Errorf("ParseSigning(svix) = %v, want ErrInvalidPartner", err)
	}
}
