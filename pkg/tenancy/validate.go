package tenancy

import (
	"fmt"

	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Destinations, named by the sink kinds' registry (internal/sink/kind).
const (
	DestPostgres   = kind.Postgres
	DestClickHouse = kind.ClickHouse
	// DestB2BPrefix starts a partner destination: "b2b:<partner>".
	DestB2BPrefix = kind.B2B + ":"
)

// ValidDest reports whether dest names a destination of a registered sink
// kind (kind.Check): "postgres", "clickhouse" or "b2b:<partner>" with
// partner following the tenant-id rule. The error wraps ErrInvalidDest.
func ValidDest(dest string) error {
	if err := kind.Check(dest); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return nil
}

func validPair(tenant, dest string) error {
	if err := events.ValidateTenant(tenant); err != nil {
		return err
	}
	return ValidDest(dest)
}
