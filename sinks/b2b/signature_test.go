package b2b_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("partner-secret-0123456789")
	body := []byte(`{"tenant":"acme","partner":"p1","events":[]}`)
	at := time.Unix(1_700_000_000, 0)
	signed := func(ts time.Time, secret []byte, body []byte) http.Header {
		h := http.Header{}
		h.Set(b2b.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(b2b.HeaderSignature, b2b.Sign(secret, ts, body))
		return h
	}
	tol := 5 * time.Minute
	for _, tc := range []struct {
		name   string
		header http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"Good", signed(at, secret, body), body, at.Add(time.Minute), nil},
		{"GoodClockBehind", signed(at, secret, body), body, at.Add(-time.Minute), nil},
		{"TamperedBody", signed(at, secret, body), []byte(`{"tenant":"evil","partner":"p1","events":[]}`), at, b2b.ErrSignature},
		{"WrongSecret", signed(at, []byte("another-secret-entirely"), body), body, at, b2b.ErrSignature},
		{"Stale", signed(at, secret, body), body, at.Add(tol + time.Second), b2b.ErrStaleTimestamp},
		{"Future", signed(at, secret, body), body, at.Add(-tol - time.Second), b2b.ErrStaleTimestamp},
		{"TamperedTimestamp", func() http.Header {
			h := signed(at, secret, body)
			h.Set(b2b.HeaderTimestamp, "1700000001")
			return h
		}(), body, at, b2b.ErrSignature},
		{"NoTimestamp", http.Header{b2b.HeaderSignature: {b2b.Sign(secret, at, body)}}, body, at, b2b.ErrStaleTimestamp},
		{"NoSignature", http.Header{b2b.HeaderTimestamp: {"1700000000"}}, body, at, b2b.ErrSignature},
		{"NotHex", http.Header{b2b.HeaderTimestamp: {"1700000000"}, b2b.HeaderSignature: {"v1=zz"}}, body, at, b2b.ErrSignature},
		{"OtherVersionOnly", http.Header{b2b.HeaderTimestamp: {"1700000000"}, b2b.HeaderSignature: {"v0=" + b2b.Sign(secret, at, body)[3:]}}, body, at, b2b.ErrSignature},
		{"RotationOneMatches", http.Header{b2b.HeaderTimestamp: {"1700000000"},
			b2b.HeaderSignature: {b2b.Sign([]byte("old-secret-xxxxxxxxxx"), at, body) + ", " + b2b.Sign(secret, at, body)}}, body, at, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := b2b.Verify(secret, tc.header, tc.body, tc.now, tol)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}
