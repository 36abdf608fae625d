package ingest

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// CSV columns with a meaning; every other column becomes a string field of
// the event's payload object, named by its header.
const (
	colProductID  = "product_id"
	colVersion    = "version"
	colOp         = "op"
	colOccurredAt = "occurred_at"
	colKey        = "idempotency_key"
	colPriority   = "priority"
)

// csvRows turns a CSV catalog file into events, one row at a time and no
// row longer than the record limit, so a file of any size is never held in
// memory whole.
type csvRows struct {
	r      *csvRecords
	tenant string
	limits events.Limits
	now    func() time.Time

	idx     map[string]int // column name → index, for the known columns
	payload []payloadCol   // the other columns
	ncols   int
}

type payloadCol struct {
	name string
	idx  int
}

// CSVRow is one data row: its line number and its event, or why it was
// rejected.
type CSVRow struct {
	Line  int
	Event events.Event
	Err   error
}

func newCSVRows(r io.Reader, tenant string, limits events.Limits, maxRecord int, now func() time.Time) (*csvRows, error) {
	cr := newCSVRecords(r, maxRecord)
	header, _, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: file is empty; the first line must be a header (product_id,version,op,...)", ErrBadCSV)
		}
		return nil, fmt.Errorf("%w: header: %v", ErrBadCSV, err)
	}
	c := &csvRows{r: cr, tenant: tenant, limits: limits, now: now, idx: map[string]int{}, ncols: len(header)}
	seen := map[string]bool{}
	for i, h := range header {
		name := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if name == "" {
			return nil, fmt.Errorf("%w: header column %d is empty", ErrBadCSV, i+1)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: header names column %q twice", ErrBadCSV, name)
		}
		seen[name] = true
		switch name {
		case colProductID, colVersion, colOp, colOccurredAt, colKey, colPriority:
			c.idx[name] = i
		default:
			c.payload = append(c.payload, payloadCol{name: name, idx: i})
		}
	}
	for _, req := range []string{colProductID, colVersion} {
		if _, ok := c.idx[req]; !ok {
			return nil, fmt.Errorf("%w: header has no %q column (required: product_id, version; optional: op, occurred_at, idempotency_key, priority; others become payload fields)", ErrBadCSV, req)
		}
	}
	return c, nil
}

// Next returns the next data row. A row-level problem is in CSVRow.Err; a
// non-nil error (io.EOF at the end) means the file cannot be read further.
func (c *csvRows) Next() (CSVRow, error) {
	rec, line, err := c.r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return CSVRow{}, io.EOF
		}
		if errors.Is(err, ErrRecordTooLong) {
			// The record was skipped whole; go on with the next.
			return CSVRow{Line: line, Err: err}, nil
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			// The reader has consumed the bad record; go on with the next.
			return CSVRow{Line: line, Err: fmt.Errorf("malformed CSV: %v", pe.Err)}, nil
		}
		return CSVRow{}, fmt.Errorf("read csv: %w", err)
	}
	row := CSVRow{Line: line}
	if len(rec) != c.ncols {
		row.Err = fmt.Errorf("has %d fields, header has %d", len(rec), c.ncols)
		return row, nil
	}
	// An import is bulk unless its rows say otherwise: a tenant's other
	// events go before it (events.Priority).
	ev := events.Event{
		Tenant:    c.tenant,
		ProductID: rec[c.idx[colProductID]],
		Op:        events.OpUpsert,
		Priority:  events.PriorityBulk,
	}
	if i, ok := c.idx[colPriority]; ok && strings.TrimSpace(rec[i]) != "" {
		ev.Priority = events.Priority(strings.TrimSpace(rec[i]))
	}
	vs := strings.TrimSpace(rec[c.idx[colVersion]])
	if vs == "" {
		row.Err = errors.New("version is required")
		return row, nil
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		row.Err = fmt.Errorf("version %q is not an integer", truncate(vs, 40))
		return row, nil
	}
	ev.Version = v
	if i, ok := c.idx[colOp]; ok && strings.TrimSpace(rec[i]) != "" {
		ev.Op = events.Op(strings.TrimSpace(rec[i]))
	}
	ev.OccurredAt = c.now().UTC()
	if i, ok := c.idx[colOccurredAt]; ok && strings.TrimSpace(rec[i]) != "" {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(rec[i]))
		if err != nil {
			row.Err = fmt.Errorf("occurred_at %q is not an RFC 3339 time", truncate(rec[i], 40))
			return row, nil
		}
		ev.OccurredAt = t
	}
	if i, ok := c.idx[colKey]; ok {
		ev.IdempotencyKey = rec[i]
	}
	if ev.Op == events.OpUpsert {
		obj := make(map[string]string, len(c.payload))
		for _, pc := range c.payload {
			obj[pc.name] = rec[pc.idx]
		}
		b, err := json.Marshal(obj)
		if err != nil {
			row.Err = fmt.Errorf("payload: %v", err)
			return row, nil
		}
		ev.Payload = b
	}
	if err := ev.Validate(c.limits); err != nil {
		row.Err = err
		return row, nil
	}
	row.Event = ev
	return row, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
