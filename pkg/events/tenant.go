package events

import (
	"fmt"
	"regexp"
)

// MaxTenantBytes is the longest tenant id.
const MaxTenantBytes = 63

// TenantPattern is the grammar of a tenant id. A tenant id is one NATS
// subject token, so it never holds '.', '*', '>' or whitespace.
var TenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidateTenant checks that id matches TenantPattern. The error is
// ErrInvalidTenant (errors.Is) and says why, quoting the id safely:
// `invalid tenant id "a.b": contains '.' at byte 1 (allowed: a-z 0-9 _ -)`.
func ValidateTenant(id string) error {
	if reason := tenantProblem(id); reason != "" {
		return fmt.Errorf("%w %s: %s", ErrInvalidTenant, quote(id), reason)
	}
	return nil
}

// tenantProblem returns why id is not a tenant id, or "".
func tenantProblem(id string) string {
	switch {
	case id == "":
		return "is empty"
	case len(id) > MaxTenantBytes:
		return fmt.Sprintf("is %d bytes, limit %d", len(id), MaxTenantBytes)
	case !isLowerAlnum(id[0]):
		return fmt.Sprintf("starts with %s; it must start with a-z or 0-9", quoteByte(id[0]))
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isLowerAlnum(c) && c != '_' && c != '-' {
			return fmt.Sprintf("contains %s at byte %d (allowed: a-z 0-9 _ -)", quoteByte(c), i)
		}
	}
	return ""
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

func quoteByte(c byte) string {
	if c < 0x80 {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x (non-ASCII)", c)
}
