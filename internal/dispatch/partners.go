package dispatch

import "context"

// PartnerSource lists a tenant's B2B partners. Each partner p makes
// "b2b:<p>" a destination of that tenant, with its own scheduler and loop.
// b2b.Registry implements it from the fairway.partners table, listing
// enabled partners only.
type PartnerSource interface {
	Partners(ctx context.Context, tenant string) ([]string, error)
}
