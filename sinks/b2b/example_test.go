package b2b_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

// A partner verifies each request before it trusts the body: the HMAC of
// the timestamp and the raw body under the shared secret, and a timestamp
// within five minutes of its clock.
func ExampleVerify() {
	secret := []byte("the-secret-you-were-given")
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		if err := b2b.Verify(secret, r.Header, body, time.Now(), b2b.VerifyToleranceDefault); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Deduplicate on r.Header.Get("Idempotency-Key"), then apply
		// each event unless a newer version of the product is stored.
		fmt.Fprintln(w, `{"ok":true}`)
	})

	// What fairway sends:
	body := `{"tenant":"acme","partner":"p1","events":[]}`
	now := time.Now()
	req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	req.Header.Set(b2b.HeaderTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(b2b.HeaderSignature, b2b.Sign(secret, now, []byte(body)))
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// A tampered body fails.
	req = httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(strings.Replace(body, "acme", "evil", 1)))
	req.Header.Set(b2b.HeaderTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(b2b.HeaderSignature, b2b.Sign(secret, now, []byte(body)))
	rec = httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// 200
	// 401
}
