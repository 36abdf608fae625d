package postgres

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Methods of writing a batch.
const (
	// MethodUnnest sends the batch as six array parameters of one
	// INSERT … SELECT FROM unnest(…) ON CONFLICT statement.
	MethodUnnest = "unnest"
	// MethodCopy copies the batch into a temporary table and merges it with
	// one INSERT … SELECT … ON CONFLICT statement, in one transaction.
	MethodCopy = "copy"

	// MethodDefault is MethodUnnest: it is one statement, with no
	// temporary table, and at least as fast as MethodCopy for batches of
	// the dispatcher's sizes (BenchmarkSink; docs/benchmarks.md, "Sinks").
	MethodDefault = MethodUnnest
	// SchemaDefault is the schema holding the products table.
	SchemaDefault = "catalog"
)

// Config configures a Sink.
type Config struct {
	// Pool is the connection pool to use. The sink does not close it.
	// Either Pool or DSN is required.
	Pool *pgxpool.Pool
	// DSN is a PostgreSQL URL the sink opens its own pool on when Pool is
	// nil; Close closes that pool.
	DSN string
	// Schema holds the products table; created at start when missing.
	// Default SchemaDefault ("catalog").
	Schema string
	// Method is MethodUnnest or MethodCopy. Default MethodDefault.
	Method string
}

// WithDefaults returns a copy of c with defaults filled in.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Schema = cmp.Or(out.Schema, SchemaDefault)
	out.Method = cmp.Or(out.Method, MethodDefault)
	return &out
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (c *Config) validate() error {
	if c.Pool == nil && c.DSN == "" {
		return fmt.Errorf("%w: Pool or DSN is required", ErrConfig)
	}
	if !identRE.MatchString(c.Schema) {
		return fmt.Errorf("%w: Schema %q is not a lower-case identifier", ErrConfig, c.Schema)
	}
	if c.Method != MethodUnnest && c.Method != MethodCopy {
		return fmt.Errorf("%w: Method %q is neither %q nor %q", ErrConfig, c.Method, MethodUnnest, MethodCopy)
	}
	return nil
}

// Sink applies product events to <schema>.products.
type Sink struct {
	pool    *pgxpool.Pool
	ownPool bool
	method  string
	sql     statements
}

var _ sink.Sink = (*Sink)(nil)

// New validates cfg, connects when cfg has a DSN instead of a pool, and
// creates the schema and table when they are missing.
func New(ctx context.Context, cfg *Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sink{pool: cfg.Pool, method: cfg.Method, sql: newStatements(cfg.Schema)}
	if s.pool == nil {
		pool, err := pgxpool.New(ctx, cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("postgres sink: connect: %w", err)
		}
		s.pool, s.ownPool = pool, true
	}
	if err := s.createSchema(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sink) createSchema(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// CREATE … IF NOT EXISTS races with itself across processes.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockKey)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.sql.createSchema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.sql.createTable)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres sink: create schema: %w", err)
	}
	return nil
}

// Close closes the pool when the sink opened it.
func (s *Sink) Close() {
	if s.ownPool {
		s.pool.Close()
	}
}

// Name returns "postgres".
func (s *Sink) Name() string { return "postgres" }

// Apply implements sink.Sink.
func (s *Sink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	errs := make([]error, len(batch))
	valid := true
	for i, r := range batch {
		if errs[i] = validate(r); errs[i] != nil {
			valid = false
		}
	}
	if len(batch) == 0 {
		return errs, nil
	}
	if valid {
		// Fast path: the whole batch in one transaction, no savepoints.
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return s.write(ctx, tx, batch, sink.Latest(batch, nil))
		})
		if err == nil {
			return errs, nil
		}
		if _, data := classify(err); !data {
			return nil, fmt.Errorf("postgres sink: apply %d records: %w", len(batch), err)
		}
	}
	// Isolate the records PostgreSQL rejects, each attempt under a
	// savepoint, and commit the rest at once.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return sink.ApplyLatest(batch, errs, func(idx []int) error {
			return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return s.write(ctx, sp, batch, idx) })
		}, classify)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres sink: apply %d records: %w", len(batch), err)
	}
	return errs, nil
}

// write writes batch[idx] (distinct keys, sorted) with the configured method.
func (s *Sink) write(ctx context.Context, tx pgx.Tx, batch []sink.Record, idx []int) error {
	if s.method == MethodCopy {
		return s.writeCopy(ctx, tx, batch, idx)
	}
	return s.writeUnnest(ctx, tx, batch, idx)
}

func (s *Sink) writeUnnest(ctx context.Context, tx pgx.Tx, batch []sink.Record, idx []int) error {
	n := len(idx)
	tenants := make([]string, n)
	products := make([]string, n)
	versions := make([]int64, n)
	deleted := make([]bool, n)
	payloads := make([]*string, n)
	updated := make([]time.Time, n)
	for j, i := range idx {
		e := &batch[i].Event
		tenants[j], products[j], versions[j], updated[j] = e.Tenant, e.ProductID, e.Version, e.OccurredAt
		deleted[j] = e.Op == events.OpDelete
		if !deleted[j] {
			p := string(e.Payload)
			payloads[j] = &p
		}
	}
	_, err := tx.Exec(ctx, s.sql.unnest, tenants, products, versions, deleted, payloads, updated)
	return err
}

func (s *Sink) writeCopy(ctx context.Context, tx pgx.Tx, batch []sink.Record, idx []int) error {
	if _, err := tx.Exec(ctx, s.sql.createStage); err != nil {
		return err
	}
	j := -1
	src := pgx.CopyFromFunc(func() ([]any, error) {
		j++
		if j >= len(idx) {
			return nil, nil
		}
		e := &batch[idx[j]].Event
		var payload any
		if e.Op != events.OpDelete {
			payload = string(e.Payload)
		}
		return []any{e.Tenant, e.ProductID, e.Version, e.Op == events.OpDelete, payload, e.OccurredAt}, nil
	})
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{stageTable}, stageColumns, src); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, s.sql.merge)
	return err
}
