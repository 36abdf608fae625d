package tenancy

import "context"

// QueuedReleases is how many Release calls wait for a statement.
func (s *Store) QueuedReleases() int {
	s.releases.mu.Lock()
	defer s.releases.mu.Unlock()
	return len(s.releases.queue)
}

// QueuedDispatches is how many DispatchMany calls wait for a statement.
func (s *Store) QueuedDispatches() int {
	s.dispatches.mu.Lock()
	defer s.dispatches.mu.Unlock()
	return len(s.dispatches.queue)
}

// DispatchCall is one DispatchMany call's arguments, for
// BenchmarkDispatchCPU.
type DispatchCall = dispatchArgs

func NewDispatchCall(tenant, dest, holder string, from uint64, ranges []Range) DispatchCall {
	return dispatchArgs{tenant: tenant, dest: dest, holder: holder, expectFrom: from, ranges: ranges, rank: 1}
}

// DispatchStatement runs calls in one statement of their own, bypassing
// the group: dispatchSQL for one, dispatchGroupSQL for more. It returns
// each call's leases.
func (s *Store) DispatchStatement(ctx context.Context, calls []DispatchCall) ([][]Lease, error) {
	var res []dispatchResult
	if len(calls) == 1 {
		res = []dispatchResult{s.dispatchOne(ctx, calls[0])}
	} else {
		var err error
		if res, err = s.dispatchGroup(ctx, calls); err != nil {
			return nil, err
		}
	}
	out := make([][]Lease, len(res))
	for i, r := range res {
		if r.err != nil {
			return nil, r.err
		}
		out[i] = r.leases
	}
	return out, nil
}
