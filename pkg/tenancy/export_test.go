package tenancy

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
