package events

import (
	"fmt"
	"strings"
)

const (
	// StreamName is the JetStream stream that stores every event.
	StreamName = "PRODUCTS"
	// SubjectPrefix is the first token of every event subject.
	SubjectPrefix = "products"
	// SubjectWildcard matches every event subject; the stream binds it.
	SubjectWildcard = SubjectPrefix + ".>"
)

// Subject returns the subject an event of tenant with op is stored on:
// "products.<tenant>.<op>". The tenant is validated, never escaped.
func Subject(tenant string, op Op) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	if !op.Valid() {
		return "", &ValidationError{Field: "op", Reason: quote(string(op)) + " is not one of upsert, delete"}
	}
	return SubjectPrefix + "." + tenant + "." + string(op), nil
}

// TenantSubjects returns the filter matching every event of tenant:
// "products.<tenant>.*". Use it for a per-tenant direct get or consumer.
func TenantSubjects(tenant string) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	return SubjectPrefix + "." + tenant + ".*", nil
}

// ParseSubject is the inverse of Subject.
func ParseSubject(subject string) (tenant string, op Op, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return "", "", fmt.Errorf("subject %s: not under %q", quote(subject), SubjectPrefix)
	}
	tenant, o, ok := strings.Cut(rest, ".")
	if !ok {
		return "", "", fmt.Errorf("subject %s: want %s.<tenant>.<op>", quote(subject), SubjectPrefix)
	}
	if err := ValidateTenant(tenant); err != nil {
		return "", "", fmt.Errorf("subject %s: %w", quote(subject), err)
	}
	if op = Op(o); !op.Valid() {
		return "", "", fmt.Errorf("subject %s: op %s is not one of upsert, delete", quote(subject), quote(o))
	}
	return tenant, op, nil
}
