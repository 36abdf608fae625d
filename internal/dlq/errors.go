package dlq

import "errors"

var (
	// ErrNotFound: no letter with that id.
	ErrNotFound = errors.New("dlq: no such letter")
	// ErrNotLetter: a DLQ message lacks the headers of a letter.
	ErrNotLetter = errors.New("dlq: not a dead letter")
	// ErrNotRedrivable: the letter holds no event that can be published
	// again (a lost range, or data that is not a valid event).
	ErrNotRedrivable = errors.New("dlq: letter cannot be redriven")
)
