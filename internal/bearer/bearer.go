// Package bearer authenticates HTTP requests by the fairway API token they
// carry (Authorization: Bearer <token>). Ingest and the dashboard use it, so
// both accept the same tokens, refuse them alike and check every request's
// token afresh: a revoked token is refused from the next request on.
package bearer

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Verifier says whom a token speaks for; *tenancy.Store is one. It must
// return an error matching tenancy.ErrUnauthorized for a malformed, unknown
// or revoked token.
type Verifier interface {
	VerifyToken(ctx context.Context, token string) (tenancy.Principal, error)
}

// Failure is why a request is not authenticated.
type Failure struct {
	// Status is 401 (no token, or a malformed, unknown or revoked one) or
	// 503 (the token could not be checked; a retry may succeed).
	Status int
	// Code names the case for a program: "unauthorized" or "unavailable".
	Code string
	// Message is safe to send to the client; it never holds the token.
	Message string
	// Err is the cause of a 503, for the server's log; nil for a 401.
	Err error
}

// Authenticate returns whom r's bearer token speaks for, checked with v. On
// failure it sets WWW-Authenticate on w for a 401 and returns the Failure
// for the caller to write in its own body format.
func Authenticate(w http.ResponseWriter, r *http.Request, v Verifier) (tenancy.Principal, *Failure) {
	tok, ok := Token(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fairway"`)
		return tenancy.Principal{}, &Failure{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing bearer token (Authorization: Bearer <token>)"}
	}
	p, err := v.VerifyToken(r.Context(), tok)
	switch {
	case errors.Is(err, tenancy.ErrUnauthorized):
		w.Header().Set("WWW-Authenticate", `Bearer realm="fairway", error="invalid_token"`)
		return tenancy.Principal{}, &Failure{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "unknown or revoked token"}
	case err != nil:
		return tenancy.Principal{}, &Failure{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "cannot verify token right now; retry", Err: err}
	}
	return p, nil
}

// Token returns the token of r's Authorization header ("Bearer", in any
// case, then the token).
func Token(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(prefix):])
	return tok, tok != ""
}
