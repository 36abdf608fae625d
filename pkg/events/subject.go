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
	// SubjectWildcard matches every event subject (the stream binds one
	// per op: StreamSubjects).
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

// StreamSubjects are the subjects the events stream binds: one per op, so
// a message on any other subject under products. is refused at publish.
func StreamSubjects() []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = SubjectPrefix + ".*." + string(op)
	}
	return out
}

// MismatchRule names the way a stored event can disagree with its subject
// (CheckSubject): the tenant, or the op.
type MismatchRule string

const (
	MismatchTenant MismatchRule = "tenant mismatch"
	MismatchOp     MismatchRule = "op mismatch"
)

// SubjectMismatchError is a stored event whose body disagrees with its
// subject. It is ErrSubjectMismatch.
type SubjectMismatchError struct {
	Rule    MismatchRule
	Subject string
	Reason  string
}

func (e *SubjectMismatchError) Error() string {
	return string(e.Rule) + ": " + e.Reason
}

func (e *SubjectMismatchError) Unwrap() error { return ErrSubjectMismatch }

// CheckSubject checks that e is what the subject it was stored on says:
// the subject's tenant and op. Tenant identity after ingest comes from the
// subject, which NATS permissions bind to a publisher; a body that names
// another tenant or op is a *SubjectMismatchError, never applied.
func (e *Event) CheckSubject(subject string) error {
	tenant, op, err := ParseSubject(subject)
	switch {
	case err != nil:
		return &SubjectMismatchError{Rule: MismatchOp, Subject: subject, Reason: err.Error()}
	case e.Tenant != tenant:
		return &SubjectMismatchError{Rule: MismatchTenant, Subject: subject,
			Reason: fmt.Sprintf("stored on %s (tenant %s), the event names tenant %s", quote(subject), quote(tenant), quote(e.Tenant))}
	case e.Op != op:
		return &SubjectMismatchError{Rule: MismatchOp, Subject: subject,
			Reason: fmt.Sprintf("stored on %s (op %s), the event names op %s", quote(subject), quote(string(op)), quote(string(e.Op)))}
	}
	return nil
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
