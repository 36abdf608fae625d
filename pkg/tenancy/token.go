package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TokenPrefix starts every API token.
const TokenPrefix = "fw_"

// tokenRandBytes is the entropy of a token; its base64url text is 43 chars.
const tokenRandBytes = 32

var tokenLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(tokenRandBytes)

// Principal is who a verified token speaks for.
type Principal struct {
	// Tenant is the tenant the token belongs to; "" for admin tokens.
	Tenant string
	// Admin tokens may act on every tenant.
	Admin bool
}

// newToken returns a fresh token and its SHA-256 hash.
func newToken() (string, []byte, error) {
	b := make([]byte, tokenRandBytes)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("tenancy: token entropy: %w", err)
	}
	tok := TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(tok))
	return tok, h[:], nil
}

// hashToken checks a presented token's shape and returns its hash.
func hashToken(tok string) ([]byte, error) {
	if len(tok) != tokenLen || !strings.HasPrefix(tok, TokenPrefix) {
		return nil, fmt.Errorf("%w: malformed token", ErrUnauthorized)
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(tok[len(TokenPrefix):]); err != nil {
		return nil, fmt.Errorf("%w: malformed token", ErrUnauthorized)
	}
	h := sha256.Sum256([]byte(tok))
	return h[:], nil
}

// IssueToken issues a new API token for tenant. The token is returned once;
// only its SHA-256 hash is stored. ErrUnknownTenant if there is no such
// tenant.
func (s *Store) IssueToken(ctx context.Context, tenant string) (string, error) {
	if err := ValidTenantID(tenant); err != nil {
		return "", err
	}
	tok, hash, err := newToken()
	if err != nil {
		return "", err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO fairway.api_tokens (hash, tenant) VALUES ($1, $2)`, hash, tenant)
	switch {
	case isFKViolation(err):
		return "", fmt.Errorf("issue token for %s: %w", tenant, ErrUnknownTenant)
	case err != nil:
		return "", fmt.Errorf("issue token for %s: %w", tenant, err)
	}
	return tok, nil
}

// IssueAdminToken issues an admin token labelled name (for audit only).
func (s *Store) IssueAdminToken(ctx context.Context, name string) (string, error) {
	tok, hash, err := newToken()
	if err != nil {
		return "", err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO fairway.api_tokens (hash, admin, name) VALUES ($1, true, $2)`, hash, name); err != nil {
		return "", fmt.Errorf("issue admin token %q: %w", name, err)
	}
	return tok, nil
}

// VerifyToken returns whom the token speaks for. ErrUnauthorized for a
// malformed, unknown or revoked token.
func (s *Store) VerifyToken(ctx context.Context, token string) (Principal, error) {
	hash, err := hashToken(token)
	if err != nil {
		return Principal{}, err
	}
	var (
		p      Principal
		tenant *string
	)
	err = s.pool.QueryRow(ctx, `SELECT tenant, admin FROM fairway.api_tokens WHERE hash = $1 AND revoked_at IS NULL`, hash).
		Scan(&tenant, &p.Admin)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Principal{}, fmt.Errorf("%w: unknown or revoked token", ErrUnauthorized)
	case err != nil:
		return Principal{}, fmt.Errorf("verify token: %w", err)
	}
	if tenant != nil {
		p.Tenant = *tenant
	}
	return p, nil
}

// RevokeToken revokes a token. ErrUnauthorized if it is malformed, unknown
// or already revoked.
func (s *Store) RevokeToken(ctx context.Context, token string) error {
	hash, err := hashToken(token)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE fairway.api_tokens SET revoked_at = now() WHERE hash = $1 AND revoked_at IS NULL`, hash)
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: unknown or revoked token", ErrUnauthorized)
	}
	return nil
}
