// Package migrate owns fairway's PostgreSQL schema. The SQL files in sql/
// are embedded and applied with goose; every service runs Up at start and
// `fairway migrate` runs it on demand. A PostgreSQL advisory lock makes
// concurrent starts safe.
package migrate

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql
var files embed.FS

// Result is one applied migration.
type Result struct {
	Version int64
	Source  string
}

// Up applies every pending migration to the database at dsn and returns what
// it applied (nothing when the schema is current).
func Up(ctx context.Context, dsn string) ([]Result, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: open database: %w", err)
	}
	defer db.Close()
	return UpDB(ctx, db)
}

// UpDB is Up on an open database handle.
func UpDB(ctx context.Context, db *sql.DB) ([]Result, error) {
	p, err := newProvider(db)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: up: %w", err)
	}
	out := make([]Result, 0, len(res))
	for _, r := range res {
		out = append(out, Result{Version: r.Source.Version, Source: r.Source.Path})
	}
	return out, nil
}

// newProvider returns a goose provider of the embedded migrations on db,
// holding PostgreSQL's advisory lock while it migrates.
func newProvider(db *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrate: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return p, nil
}

var _ = stdlib.GetDefaultDriver
