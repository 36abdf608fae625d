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
	// per op and priority: StreamSubjects).
	SubjectWildcard = SubjectPrefix + ".>"
)

// Subject returns the subject a normal event of tenant with op is stored
// on: "products.<tenant>.<op>". The tenant is validated, never escaped.
func Subject(tenant string, op Op) (string, error) {
	return SubjectFor(tenant, op, PriorityNormal)
}

// SubjectFor returns the subject an event of tenant with op and priority p
// is stored on: "products.<tenant>.<op>" for normal (or ""), else
// "products.<tenant>.<op>.<priority>".
func SubjectFor(tenant string, op Op, p Priority) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	if !op.Valid() {
		return "", &ValidationError{Field: "op", Reason: quote(string(op)) + " is not one of upsert, delete"}
	}
	if !p.Valid() {
		return "", &ValidationError{Field: "priority", Reason: quote(string(p)) + " is not one of high, normal, bulk"}
	}
	return SubjectPrefix + "." + tenant + "." + string(op) + p.subjectSuffix(), nil
}

// StreamSubjects are the subjects the events stream binds: one per op and
// priority, so a message on any other subject under products. is refused
// at publish.
func StreamSubjects() []string {
	var out []string
	for _, p := range []Priority{PriorityNormal, PriorityHigh, PriorityBulk} {
		for _, op := range ops {
			out = append(out, SubjectPrefix+".*."+string(op)+p.subjectSuffix())
		}
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
// another tenant or op is a *SubjectMismatchError, never applied. The
// priority, too, is the subject's: e's is set to it.
func (e *Event) CheckSubject(subject string) error {
	tenant, op, p, err := ParseSubject(subject)
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
	e.Priority = p
	if p == PriorityNormal {
		e.Priority = ""
	}
	return nil
}

// ParseSubject is the inverse of SubjectFor, for a subject as published
// or as stored in a partitioned stream (its partition token is skipped:
// SubjectPartition reads it); p is PriorityNormal for a normal event.
func ParseSubject(subject string) (tenant string, op Op, p Priority, err error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return "", "", "", fmt.Errorf("subject %s: not under %q", quote(subject), SubjectPrefix)
	}
	_, rest = CutPartition(rest)
	tenant, o, ok := strings.Cut(rest, ".")
	if !ok {
		return "", "", "", fmt.Errorf("subject %s: want %s.<tenant>.<op>[.<priority>]", quote(subject), SubjectPrefix)
	}
	if err := ValidateTenant(tenant); err != nil {
		return "", "", "", fmt.Errorf("subject %s: %w", quote(subject), err)
	}
	o, pr, hasP := strings.Cut(o, ".")
	if op = Op(o); !op.Valid() {
		return "", "", "", fmt.Errorf("subject %s: op %s is not one of upsert, delete", quote(subject), quote(o))
	}
	p = PriorityNormal
	if hasP {
		if p = Priority(pr); !p.Valid() || p == "" || p == PriorityNormal {
			return "", "", "", fmt.Errorf("subject %s: priority %s is not one of high, bulk", quote(subject), quote(pr))
		}
	}
	return tenant, op, p, nil
}
