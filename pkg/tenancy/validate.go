package tenancy

import (
	"fmt"

	"github.com/fairwayhq/fairway/internal/sink/kind"
)

// Destinations, named by the sink kinds' registry (internal/sink/kind).
const (
	DestPostgres   = kind.Postgres
	DestClickHouse = kind.ClickHouse
	// DestB2BPrefix starts a partner destination: "b2b:<partner>".
	DestB2BPrefix = kind.B2B + ":"
)

// maxIDLen is the longest tenant id (and partner name).
const maxIDLen = 63

// ValidTenantID reports whether id is a valid tenant id:
// ^[a-z0-9][a-z0-9_-]{0,62}$ — safe as a NATS subject token and in lease
// ids. pkg/events applies the same rule; tenancy does not import it.
func ValidTenantID(id string) error {
	if !validName(id) {
		return fmt.Errorf("%w: %q (want ^[a-z0-9][a-z0-9_-]{0,62}$)", ErrInvalidTenant, id)
	}
	return nil
}

// ValidDest reports whether dest names a destination of a registered sink
// kind (kind.Check): "postgres", "clickhouse" or "b2b:<partner>" with
// partner following the tenant-id rule. The error wraps ErrInvalidDest.
func ValidDest(dest string) error {
	if err := kind.Check(dest); err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func validPair(tenant, dest string) error {
	if err := ValidTenantID(tenant); err != nil {
		return err
	}
	return ValidDest(dest)
}
