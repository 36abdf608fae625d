package migrate

import (
	"context"
	"database/sql"
	"fmt"
)

// UpTo applies the migrations up to version, so that a test can write rows
// as an older schema held them and then migrate them.
func UpTo(ctx context.Context, dsn string, version int64) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return fmt.Errorf("migrate: open database: %w", err)
	}
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrate: up to %d: %w", version, err)
	}
	return nil
}
