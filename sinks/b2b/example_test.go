package b2b_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

// A partner on the default scheme, Standard Webhooks, verifies each
// request with a reference library before it trusts the body: here the Go
// one, given the secret in its "whsec_" form.
func Example_standardWebhooks() {
	const secret = "whsec_o2LwUnDj2i8b4/zBXOy58SCtMLEhkc2G"
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		if err := wh.Verify(body, r.Header); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Deduplicate on r.Header.Get("webhook-id"), then apply each
		// event unless a newer version of the product is stored.
		fmt.Fprintln(w, `{"ok":true}`)
	})
	fmt.Println(send(handler, b2b.SigningStandard, secret))
	// Output:
	// 200 401
}

// A partner on fairway's own scheme verifies each request with
// SigningFairway.Verify (or the same steps in any language): the HMAC of
// the timestamp and the raw body under the shared secret, and a timestamp
// within five minutes of its clock.
func ExampleSigning_Verify() {
	secret := []byte("the-secret-you-were-given")
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		if err := b2b.SigningFairway.Verify(secret, r.Header, body, time.Now(), b2b.VerifyToleranceDefault); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Deduplicate on r.Header.Get("Idempotency-Key"), then apply
		// each event unless a newer version of the product is stored.
		fmt.Fprintln(w, `{"ok":true}`)
	})
	fmt.Println(send(handler, b2b.SigningFairway, string(secret)))
	// Output:
	// 200 401
}

// send passes handler a request signed as fairway signs it, then the same
// request with a tampered body, and returns the two statuses.
func send(handler http.Handler, signing b2b.Signing, secret string) string {
	key, err := signing.ParseSecret(secret)
	if err != nil {
		panic(err)
	}
	body := `{"tenant":"acme","partner":"p1","events":[]}`
	var codes []int
	for _, sent := range []string{body, strings.Replace(body, "acme", "evil", 1)} {
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(sent))
		signing.Sign(req.Header, "fw1-0123456789abcdef0123456789abcdef", time.Now(), []byte(body), key)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	return fmt.Sprint(codes[0], codes[1])
}
