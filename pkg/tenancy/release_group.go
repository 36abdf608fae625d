package tenancy

import (
	"context"
	"time"
)

// releaseGroupMax is the most releases one grouped statement carries.
const releaseGroupMax = 64

// releaseLinger is how long a release waits for others while releases
// come often (grouper): a slot freed that much later costs no tenant a
// grant it could have had, and four releases in one statement cost the
// backend about a third each of one alone.
const releaseLinger = 2 * time.Millisecond

// newReleaseGroup groups Release calls (grouper): most of what a release
// costs PostgreSQL's backend is the statement's, so slots released together
// in one statement cost a fraction each (BenchmarkReleaseCPU;
// docs/dispatcher.md, "Grouped releases and dispatches").
func (s *Store) newReleaseGroup() *grouper[Lease, error] {
	return &grouper[Lease, error]{max: releaseGroupMax, run: s.releaseBatch, linger: releaseLinger}
}

// releaseBatch releases leases: one alone with releaseOne, more in one
// releaseManySQL statement. Each call gets its own outcome, exactly as
// Release would have given it: nil for the leases the statement released,
// and what releaseOne finds for the others (already released by the same
// lease: nil; fenced out: ErrStaleLease). A lease the statement released
// is not asked again: its slot may be leased anew by then.
func (s *Store) releaseBatch(ctx context.Context, ls []Lease) []error {
	errs := make([]error, len(ls))
	var released []bool
	if len(ls) > 1 {
		if x, err := releaseArgs(ls); err == nil {
			released, _ = s.releaseMany(ctx, x) // on error, each alone
		}
	}
	for i, l := range ls {
		if released == nil || !released[i] {
			errs[i] = s.releaseOne(ctx, l.ID, l.Token)
		}
	}
	return errs
}

// ReleaseStats returns how many release statements Release has run and
// how many Release calls they carried: calls/statements is the grouping
// achieved.
func (s *Store) ReleaseStats() (statements, calls int) { return s.releases.stats() }
