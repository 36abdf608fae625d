package dlq

import "errors"

var (
	// ErrNotFound: no letter with that id.
	ErrNotFound = errors.New("dlq: no such letter")
	// ErrNotLetter: a DLQ message lacks the headers of a letter.
	ErrNotLetter = errors.New("dlq: not a dead letter")
	// ErrNotRedrivable: the letter holds no event that can be sent again
	// (a lost range, data that is not a valid event, or an event that
	// disagrees with the subject it was stored on).
	ErrNotRedrivable = errors.New("dlq: letter cannot be redriven")
)
