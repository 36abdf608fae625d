package dashboard

import "errors"

var (
	// ErrConfig marks an invalid Config, SamplerConfig, metrics URL or
	// missing dependency.
	ErrConfig = errors.New("dashboard: invalid configuration")
	// ErrQuery marks invalid parameters of GET /ui/api/status (ParseQuery).
	ErrQuery = errors.New("invalid query")
)
