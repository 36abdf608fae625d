package b2b

import (
	"context"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// FollowChanges applies changes to the sink's partner at once: a Registry
// change notifies (tenancy.NotifyPartner), and for each change to this
// sink's partner of a tenant it drops the cached settings, so that the next
// batch reads them again rather than after PartnerCacheTTL, and logs the
// change. An empty notification (changes may have been missed while the
// listener reconnected) drops every tenant's. changes is what
// tenancy.Store.ListenPartners returns; FollowChanges returns when it
// closes or ctx ends.
func (s *Sink) FollowChanges(ctx context.Context, changes <-chan tenancy.Released) {
	for {
		select {
		case <-ctx.Done():
			return
		case r, ok := <-changes:
			if !ok {
				return
			}
			switch {
			case r.Tenant == "":
				s.mu.Lock()
				clear(s.partners)
				s.mu.Unlock()
			case r.Dest == s.Name():
				s.mu.Lock()
				delete(s.partners, r.Tenant)
				s.mu.Unlock()
				s.log.Info("partner "+r.Partner+"; its settings apply from the next batch", "tenant", r.Tenant)
			}
		}
	}
}
