package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ImportStatus is the life-cycle state of a CSV import.
type ImportStatus string

// Import states.
const (
	ImportQueued              ImportStatus = "queued"
	ImportRunning             ImportStatus = "running"
	ImportSucceeded           ImportStatus = "succeeded"
	ImportSucceededWithErrors ImportStatus = "succeeded_with_errors"
	ImportFailed              ImportStatus = "failed"
)

// RowError is one rejected CSV row.
type RowError struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// ImportJob is what GET /v1/imports/{id} reports.
type ImportJob struct {
	ID         string       `json:"id"`
	Tenant     string       `json:"tenant"`
	Status     ImportStatus `json:"status"`
	Bytes      int64        `json:"bytes"`
	RowsTotal  int64        `json:"rows_total"`
	RowsOK     int64        `json:"rows_ok"`
	RowsFailed int64        `json:"rows_failed"`
	RowsDup    int64        `json:"rows_duplicate"`
	Errors     []RowError   `json:"errors"`
	Failure    string       `json:"failure,omitempty"`
	CreatedAt  time.Time    `json:"created_at"`
	StartedAt  *time.Time   `json:"started_at,omitempty"`
	FinishedAt *time.Time   `json:"finished_at,omitempty"`

	node      string
	spoolPath string
	requestID string
}

// Finished reports whether the job reached a final state.
func (j ImportJob) Finished() bool {
	return j.Status == ImportSucceeded || j.Status == ImportSucceededWithErrors || j.Status == ImportFailed
}

// importStore keeps import jobs in fairway.imports.
type importStore struct{ pool *pgxpool.Pool }

func (s *importStore) create(ctx context.Context, j ImportJob) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO fairway.imports (id, tenant_id, node, status, spool_path, bytes, request_id)
		VALUES ($1, $2, $3, 'queued', $4, $5, $6)`,
		j.ID, j.Tenant, j.node, j.spoolPath, j.Bytes, j.requestID)
	if err != nil {
		return fmt.Errorf("create import %s: %w", j.ID, err)
	}
	return nil
}

const importCols = `id::text, tenant_id, node, status, spool_path, bytes, rows_total, rows_ok, rows_failed, rows_dup,
	errors, COALESCE(failure, ''), request_id, created_at, started_at, finished_at`

func scanImport(row pgx.Row) (ImportJob, error) {
	var j ImportJob
	var errs []byte
	err := row.Scan(&j.ID, &j.Tenant, &j.node, &j.Status, &j.spoolPath, &j.Bytes, &j.RowsTotal, &j.RowsOK,
		&j.RowsFailed, &j.RowsDup, &errs, &j.Failure, &j.requestID, &j.CreatedAt, &j.StartedAt, &j.FinishedAt)
	if err != nil {
		return j, err
	}
	if err := json.Unmarshal(errs, &j.Errors); err != nil {
		return j, fmt.Errorf("decode import errors: %w", err)
	}
	if j.Errors == nil {
		j.Errors = []RowError{}
	}
	return j, nil
}

func (s *importStore) get(ctx context.Context, id string) (ImportJob, error) {
	j, err := scanImport(s.pool.QueryRow(ctx, `SELECT `+importCols+` FROM fairway.imports WHERE id::text = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return j, ErrImportNotFound
	}
	if err != nil {
		return j, fmt.Errorf("get import %s: %w", id, err)
	}
	return j, nil
}

// unfinished lists this node's queued or running imports, oldest first.
func (s *importStore) unfinished(ctx context.Context, node string) ([]ImportJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+importCols+` FROM fairway.imports
		WHERE node = $1 AND status IN ('queued', 'running') ORDER BY created_at`, node)
	if err != nil {
		return nil, fmt.Errorf("list unfinished imports: %w", err)
	}
	defer rows.Close()
	var out []ImportJob
	for rows.Next() {
		j, err := scanImport(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

func (s *importStore) markRunning(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `UPDATE fairway.imports SET status = 'running', started_at = COALESCE(started_at, now()) WHERE id = $1`, id)
	return err
}

// progress records rows processed so far. rows_total counts rows whose
// outcome is final, so a resumed import skips exactly those.
func (s *importStore) progress(ctx context.Context, j *ImportJob) error {
	errs, err := json.Marshal(j.Errors)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `UPDATE fairway.imports
		SET rows_total = $2, rows_ok = $3, rows_failed = $4, rows_dup = $5, errors = $6
		WHERE id = $1`, j.ID, j.RowsTotal, j.RowsOK, j.RowsFailed, j.RowsDup, errs)
	if err != nil {
		return fmt.Errorf("record import progress %s: %w", j.ID, err)
	}
	return nil
}

func (s *importStore) finish(ctx context.Context, j *ImportJob) error {
	errs, err := json.Marshal(j.Errors)
	if err != nil {
		return err
	}
	var failure *string
	if j.Failure != "" {
		failure = &j.Failure
	}
	_, err = s.pool.Exec(ctx, `UPDATE fairway.imports
		SET status = $2, rows_total = $3, rows_ok = $4, rows_failed = $5, rows_dup = $6, errors = $7,
		    failure = $8, finished_at = now(), started_at = COALESCE(started_at, now())
		WHERE id = $1`, j.ID, j.Status, j.RowsTotal, j.RowsOK, j.RowsFailed, j.RowsDup, errs, failure)
	if err != nil {
		return fmt.Errorf("finish import %s: %w", j.ID, err)
	}
	return nil
}
