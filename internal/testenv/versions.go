package testenv

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresVersions runs q, which selects tenant_id, product_id and
// version, on pool and returns the version of each (tenant, product): what
// the postgres sink holds (catalog.products), say.
func PostgresVersions(ctx context.Context, pool *pgxpool.Pool, q string, args ...any) (map[[2]string]int64, error) {
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanVersions(rows)
}

// ClickHouseVersions is PostgresVersions on a ClickHouse connection: what
// the clickhouse sink holds (products_latest FINAL), say.
func ClickHouseVersions(ctx context.Context, conn clickhouse.Conn, q string, args ...any) (map[[2]string]int64, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanVersions(rows)
}

// versionRows is what the rows of pgx and of clickhouse-go share.
type versionRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

func scanVersions(rows versionRows) (map[[2]string]int64, error) {
	m := map[[2]string]int64{}
	for rows.Next() {
		var k [2]string
		var v int64
		if err := rows.Scan(&k[0], &k[1], &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}
