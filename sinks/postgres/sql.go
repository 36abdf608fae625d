package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// schemaLockKey serialises schema creation across processes starting at once.
const schemaLockKey = 0x6661697277617901 // "fairway\x01"

// stageTable is the temporary table, private to its connection, that the
// copy method stages into.
const stageTable = "fairway_products_stage"

type statements struct {
	createSchema string
	createTable  string
	unnest       string
	createStage  string
	merge        string
}

func newStatements(schema string) statements {
	s := pgx.Identifier{schema}.Sanitize()
	products := pgx.Identifier{schema, "products"}.Sanitize()
	const onConflict = `
ON CONFLICT (tenant_id, product_id) DO UPDATE SET
	version    = EXCLUDED.version,
	deleted    = EXCLUDED.deleted,
	payload    = EXCLUDED.payload,
	updated_at = EXCLUDED.updated_at,
	applied_at = EXCLUDED.applied_at
WHERE p.version < EXCLUDED.version`
	return statements{
		createSchema: "CREATE SCHEMA IF NOT EXISTS " + s,
		createTable: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	tenant_id  text        NOT NULL,
	product_id text        NOT NULL,
	version    bigint      NOT NULL,
	deleted    boolean     NOT NULL DEFAULT false,
	payload    jsonb,
	updated_at timestamptz NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, product_id)
)`, products),
		unnest: fmt.Sprintf(`INSERT INTO %s AS p (tenant_id, product_id, version, deleted, payload, updated_at, applied_at)
SELECT u.tenant_id, u.product_id, u.version, u.deleted, u.payload::jsonb, u.updated_at, now()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[], $5::text[], $6::timestamptz[])
	AS u(tenant_id, product_id, version, deleted, payload, updated_at)`+onConflict, products),
		createStage: `CREATE TEMP TABLE IF NOT EXISTS ` + stageTable + ` (
	tenant_id  text,
	product_id text,
	version    bigint,
	deleted    boolean,
	payload    jsonb,
	updated_at timestamptz
) ON COMMIT DELETE ROWS`,
		// The CTE empties the stage, so that a later attempt in the same
		// transaction (bisection) merges only its own rows.
		merge: fmt.Sprintf(`WITH s AS (DELETE FROM `+stageTable+` RETURNING *)
INSERT INTO %s AS p (tenant_id, product_id, version, deleted, payload, updated_at, applied_at)
SELECT s.tenant_id, s.product_id, s.version, s.deleted, s.payload, s.updated_at, now()
FROM s ORDER BY s.tenant_id, s.product_id`+onConflict, products),
	}
}

// stageColumns are the columns the copy method writes, in order.
var stageColumns = []string{"tenant_id", "product_id", "version", "deleted", "payload", "updated_at"}
