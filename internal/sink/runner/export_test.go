package runner

// Config returns the configuration in effect (defaults filled in).
func (r *Runner) Config() Config { return *r.cfg }
