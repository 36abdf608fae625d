package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultDatabaseURL is used when DATABASE_URL is not set: the local server
// on the default port, as Debian installs it.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

const pgHint = "start one with `make services` (scripts/dev-services.sh) or point DATABASE_URL at a PostgreSQL 14+ server"

// DatabaseURL returns the admin URL tests connect to.
func DatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// NewDatabase creates a fresh, empty database for the test and returns its
// URL. It is dropped when the test ends (unless FAIRWAY_KEEP_TEST_DB is set).
// The test fails, with instructions, when PostgreSQL does not answer.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := DatabaseURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("PostgreSQL not reachable at %s: %v\n%s", redact(admin), err, pgHint)
	}
	defer conn.Close(context.Background())

	name := "fw_test_" + strings.ToLower(sanitize(t.Name())) + "_" + randHex(4)
	if len(name) > 63 {
		name = name[:54] + "_" + randHex(4)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if os.Getenv("FAIRWAY_KEEP_TEST_DB") != "" {
			t.Logf("keeping test database %s", name)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewPool is NewDatabase plus a pgx pool on it, closed at cleanup.
func NewPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pool for %s: %v", redact(dsn), err)
	}
	t.Cleanup(pool.Close)
	return pool, dsn
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redact hides a password in a URL so it never reaches test logs.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "<unparseable url>"
	}
	return u.Redacted()
}

// Redact is exported for other test helpers that print DSNs.
func Redact(dsn string) string { return redact(dsn) }
