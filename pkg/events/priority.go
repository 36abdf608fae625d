package events

// Priority orders a tenant's events for one destination: high before
// normal before bulk. Across tenants the dispatcher's weighted fair share
// decides, whatever the priority; within a product, versions still decide
// (a destination never replaces a newer version with an older one, in
// whichever order their priorities dispatch them).
//
// An event's priority is its subject's: normal events are stored on
// products.<tenant>.<op>, the others on products.<tenant>.<op>.<priority>
// (SubjectFor). The event's priority field says the same for its reader.
type Priority string

const (
	// PriorityHigh goes before the tenant's other events: an urgent price
	// or stock change.
	PriorityHigh Priority = "high"
	// PriorityNormal is the default ("" means normal).
	PriorityNormal Priority = "normal"
	// PriorityBulk goes after the tenant's other events: imports (CSV
	// imports default to it).
	PriorityBulk Priority = "bulk"
)

// Priorities lists every priority, highest first: the order in which a
// tenant's events are dispatched.
var Priorities = []Priority{PriorityHigh, PriorityNormal, PriorityBulk}

// Valid reports whether p is a known priority ("" is normal).
func (p Priority) Valid() bool {
	return p == "" || p == PriorityHigh || p == PriorityNormal || p == PriorityBulk
}

// Or returns p, or normal when p is "".
func (p Priority) Or() Priority {
	if p == "" {
		return PriorityNormal
	}
	return p
}

// Rank is p's place in Priorities (0 highest); an unknown priority ranks
// as normal.
func (p Priority) Rank() int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityBulk:
		return 2
	}
	return 1
}

// subjectSuffix is what p adds to an event's subject: nothing for normal.
func (p Priority) subjectSuffix() string {
	if p.Or() == PriorityNormal {
		return ""
	}
	return "." + string(p)
}
