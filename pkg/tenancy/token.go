package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/pkg/events"
)

// TokenPrefix starts every API token.
const TokenPrefix = "fw_"

// tokenRandBytes is the entropy of a token; its base64url text is 43 chars.
const tokenRandBytes = 32

var tokenLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(tokenRandBytes)

// TokenShownLen is how much of a token is stored in clear and shown by
// Tokens: TokenPrefix and 8 random characters (48 of its 256 bits), enough
// to tell tokens apart, far too little to guess the rest.
const TokenShownLen = len(TokenPrefix) + 8

// Principal is who a verified token speaks for.
type Principal struct {
	// Tenant is the tenant the token belongs to; "" for admin tokens.
	Tenant string
	// Admin tokens may act on every tenant.
	Admin bool
}

// TokenInfo describes an API token without its secret.
type TokenInfo struct {
	// ID names the token for `fairway tokens revoke`.
	ID int64
	// Prefix is the token's first TokenShownLen characters; "" for a token
	// whose prefix was never stored (it is named by its ID).
	Prefix string
	// Tenant is the tenant the token belongs to; "" for admin tokens.
	Tenant string
	// Admin tokens may act on every tenant.
	Admin bool
	// Name is the label an admin token was issued with.
	Name      string
	CreatedAt time.Time
	// RevokedAt is when the token was revoked; zero while it is valid.
	RevokedAt time.Time
}

const tokenInfoCols = `id, prefix, coalesce(tenant, ''), admin, name, created_at, revoked_at`

func scanTokenInfo(row pgx.Row) (TokenInfo, error) {
	var (
		t       TokenInfo
		revoked *time.Time
	)
	if err := row.Scan(&t.ID, &t.Prefix, &t.Tenant, &t.Admin, &t.Name, &t.CreatedAt, &revoked); err != nil {
		return TokenInfo{}, err
	}
	if revoked != nil {
		t.RevokedAt = *revoked
	}
	return t, nil
}

// newToken is a fresh token ready to be inserted: the secret (returned to
// the caller once), its SHA-256 hash and the prefix kept in clear.
type newToken struct {
	secret, prefix string
	hash           []byte
}

func generateToken() (newToken, error) {
	b := make([]byte, tokenRandBytes)
	if _, err := rand.Read(b); err != nil {
		return newToken{}, fmt.Errorf("tenancy: token entropy: %w", err)
	}
	tok := TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(tok))
	return newToken{secret: tok, prefix: tok[:TokenShownLen], hash: h[:]}, nil
}

// insert stores the token's hash and prefix for tenant, or as an admin
// token labelled name when tenant is "".
func (t newToken) insert(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, tenant, name string) error {
	_, err := db.Exec(ctx, `INSERT INTO fairway.api_tokens (hash, prefix, tenant, admin, name)
		VALUES ($1, $2, nullif($3, ''), $3 = '', $4)`, t.hash, t.prefix, tenant, name)
	return err
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
	if err := events.ValidateTenant(tenant); err != nil {
		return "", err
	}
	tok, err := generateToken()
	if err != nil {
		return "", err
	}
	err = tok.insert(ctx, s.pool, tenant, "")
	switch {
	case isFKViolation(err):
		return "", fmt.Errorf("issue token for %s: %w", tenant, ErrUnknownTenant)
	case err != nil:
		return "", fmt.Errorf("issue token for %s: %w", tenant, err)
	}
	return tok.secret, nil
}

// IssueAdminToken issues an admin token labelled name (for audit only).
func (s *Store) IssueAdminToken(ctx context.Context, name string) (string, error) {
	tok, err := generateToken()
	if err != nil {
		return "", err
	}
	if err := tok.insert(ctx, s.pool, "", name); err != nil {
		return "", fmt.Errorf("issue admin token %q: %w", name, err)
	}
	return tok.secret, nil
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

// Tokens lists the API tokens, revoked ones included, oldest first: those
// of tenant, or every tenant's and the admin tokens when tenant is "".
func (s *Store) Tokens(ctx context.Context, tenant string) ([]TokenInfo, error) {
	if tenant != "" {
		if err := events.ValidateTenant(tenant); err != nil {
			return nil, err
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+tokenInfoCols+` FROM fairway.api_tokens
		WHERE $1 = '' OR tenant = $1 ORDER BY id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenInfo, error) { return scanTokenInfo(r) })
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// tokenRef turns what an operator names a token by into a WHERE clause on
// fairway.api_tokens and its argument: the id Tokens lists (digits), the
// whole token (its hash), or its prefix (TokenShownLen characters).
func tokenRef(ref string) (string, any, error) {
	switch {
	case ref != "" && strings.Trim(ref, "0123456789") == "":
		id, err := strconv.ParseInt(ref, 10, 64)
		if err != nil {
			return "", nil, fmt.Errorf("%w: token id %s out of range", ErrInvalidArgument, ref)
		}
		return "id = $1", id, nil
	case len(ref) == TokenShownLen && strings.HasPrefix(ref, TokenPrefix):
		return "prefix = $1", ref, nil
	}
	hash, err := hashToken(ref)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %q is not a token id, a token prefix (%d characters) nor a token", ErrInvalidArgument, redactToken(ref), TokenShownLen)
	}
	return "hash = $1", hash, nil
}

// redactToken shows at most the prefix of what may be a secret, for errors.
func redactToken(s string) string {
	if len(s) <= TokenShownLen {
		return s
	}
	return s[:TokenShownLen] + "…"
}

// RevokeToken revokes the token ref names: its ID, its Prefix, or the whole
// token. The token is refused from the next VerifyToken on, in every
// process: nothing caches a verified token. It returns the token as
// revoked. ErrUnknownToken when ref names no token; ErrInvalidArgument when
// ref is none of the three or a prefix names several tokens; ErrTokenRevoked,
// with the token, when it was revoked already.
func (s *Store) RevokeToken(ctx context.Context, ref string) (TokenInfo, error) {
	where, arg, err := tokenRef(ref)
	if err != nil {
		return TokenInfo{}, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+tokenInfoCols+` FROM fairway.api_tokens WHERE `+where+` ORDER BY id LIMIT 2`, arg)
	if err != nil {
		return TokenInfo{}, fmt.Errorf("revoke token: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenInfo, error) { return scanTokenInfo(r) })
	switch {
	case err != nil:
		return TokenInfo{}, fmt.Errorf("revoke token: %w", err)
	case len(found) == 0:
		return TokenInfo{}, fmt.Errorf("revoke token %s: %w", redactToken(ref), ErrUnknownToken)
	case len(found) > 1:
		return TokenInfo{}, fmt.Errorf("%w: prefix %s names several tokens; revoke by id (fairway tokens list)", ErrInvalidArgument, ref)
	}
	t := found[0]
	if t.RevokedAt.IsZero() {
		err = s.pool.QueryRow(ctx, `UPDATE fairway.api_tokens SET revoked_at = now()
			WHERE id = $1 AND revoked_at IS NULL RETURNING revoked_at`, t.ID).Scan(&t.RevokedAt)
		if err == nil {
			return t, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return TokenInfo{}, fmt.Errorf("revoke token %d: %w", t.ID, err)
		}
		// Revoked by someone else between the two statements.
		if err := s.pool.QueryRow(ctx, `SELECT revoked_at FROM fairway.api_tokens WHERE id = $1`, t.ID).Scan(&t.RevokedAt); err != nil {
			return TokenInfo{}, fmt.Errorf("revoke token %d: %w", t.ID, err)
		}
	}
	return t, fmt.Errorf("revoke token %d: %w at %s", t.ID, ErrTokenRevoked, t.RevokedAt.UTC().Format(time.RFC3339))
}
