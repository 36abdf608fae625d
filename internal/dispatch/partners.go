package dispatch

import "context"

// PartnerSource lists a tenant's B2B partners. Each partner p makes
// "b2b:<p>" a destination of that tenant, with its own scheduler and loop.
// The fairway.partners table (migration 00004) will implement it; tests use
// a map.
type PartnerSource interface {
	Partners(ctx context.Context, tenant string) ([]string, error)
}

// StaticPartners is a PartnerSource from a map: tenant → partner names.
type StaticPartners map[string][]string

// Partners implements PartnerSource.
func (s StaticPartners) Partners(_ context.Context, tenant string) ([]string, error) {
	return s[tenant], nil
}

var _ PartnerSource = StaticPartners(nil)
