package clickhouse

import "fmt"

const (
	eventsTable = "product_events"
	latestTable = "products_latest"
)

type statements struct {
	createEvents string
	createLatest string
	insertEvents string
	insertLatest string
}

func newStatements(db string) statements {
	q := func(table string) string { return quoteIdent(db) + "." + table }
	return statements{
		createEvents: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	tenant_id       String,
	product_id      String,
	version         Int64,
	deleted         UInt8,
	payload         String,
	occurred_at     DateTime,
	occurred_at_ns  Int64,
	idempotency_key String,
	seq             UInt64,
	published_at    DateTime,
	applied_at      DateTime
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(occurred_at)
ORDER BY (tenant_id, product_id, version)`, q(eventsTable)),
		createLatest: fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
	tenant_id      String,
	product_id     String,
	version        Int64,
	deleted        UInt8,
	payload        String,
	occurred_at    DateTime,
	occurred_at_ns Int64,
	applied_at     DateTime
) ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant_id, product_id)`, q(latestTable)),
		insertEvents: "INSERT INTO " + q(eventsTable) +
			" (tenant_id, product_id, version, deleted, payload, occurred_at, occurred_at_ns, idempotency_key, seq, published_at, applied_at)",
		insertLatest: "INSERT INTO " + q(latestTable) +
			" (tenant_id, product_id, version, deleted, payload, occurred_at, occurred_at_ns, applied_at)",
	}
}

// quoteIdent quotes a validated identifier for ClickHouse.
func quoteIdent(s string) string { return "`" + s + "`" }
