package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// ErrConfig is wrapped by every error New returns for an invalid Config.
var ErrConfig = errors.New("postgres sink: invalid config")

// classify reports whether err is PostgreSQL rejecting the data of the
// statement (SQLSTATE class 22 data exception or 23 integrity constraint
// violation), which bisection can pin to records, and the reason to record
// for such a record.
func classify(err error) (reason string, data bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	switch pgErr.Code[:2] {
	case "22", "23":
		return fmt.Sprintf("postgres rejected the record: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code), true
	}
	return "", false
}

// validate is the sink's own check of a record, before PostgreSQL sees it.
func validate(r sink.Record) error {
	e := r.Event
	switch {
	case !e.Op.Valid():
		return sink.Permanent(fmt.Sprintf("unknown op %q", e.Op), sink.ErrInvalidRecord)
	case e.Op == events.OpUpsert && len(e.Payload) == 0:
		return sink.Permanent("upsert without payload", sink.ErrInvalidRecord)
	}
	return nil
}
