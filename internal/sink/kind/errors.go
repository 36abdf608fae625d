package kind

import "errors"

// ErrInvalid is wrapped by the error of Parse and Check for a destination
// that no kind accepts.
var ErrInvalid = errors.New("invalid destination")
