package dashboard

import "errors"

// ErrConfig marks an invalid Config, SamplerConfig or missing dependency.
var ErrConfig = errors.New("dashboard: invalid configuration")
