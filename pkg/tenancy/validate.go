package tenancy

import (
	"fmt"
	"strings"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Destinations other than b2b partners.
const (
	DestPostgres   = "postgres"
	DestClickHouse = "clickhouse"
	// DestB2BPrefix starts a partner destination: "b2b:<partner>".
	DestB2BPrefix = "b2b:"
)

// ValidDest reports whether dest names a sink target: "postgres",
// "clickhouse" or "b2b:<partner>" with partner following the tenant-id rule
// (events.ValidateTenant).
func ValidDest(dest string) error {
	switch {
	case dest == DestPostgres, dest == DestClickHouse:
		return nil
	case strings.HasPrefix(dest, DestB2BPrefix) && events.ValidateTenant(dest[len(DestB2BPrefix):]) == nil:
		return nil
	}
	return fmt.Errorf("%w: %q (want postgres, clickhouse or b2b:<partner>)", ErrInvalidDest, dest)
}

func validPair(tenant, dest string) error {
	if err := events.ValidateTenant(tenant); err != nil {
		return err
	}
	return ValidDest(dest)
}
