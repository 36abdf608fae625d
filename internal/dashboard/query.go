package dashboard

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/fairwayhq/fairway/pkg/events"
)

// FilterMax is the longest Query.Filter: a tenant id's length.
const FilterMax = 63

// Query picks the tenants of one page of a Snapshot.
type Query struct {
	// Filter keeps the tenants whose id contains it; "" keeps every
	// tenant. Tenant ids are lower case, so is the filter.
	Filter string
	// Page is the page, from 1 (0 means 1). A page past the last serves
	// the last.
	Page int
}

func (q Query) matches(tenant string) bool { return strings.Contains(tenant, q.Filter) }

// ParseQuery reads a Query from the parameters of GET /ui/api/status:
// filter (a part of a tenant id, upper case folded to lower) and page (a
// number from 1). It returns ErrQuery, saying what is wrong, for anything
// else.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	q.Filter = strings.ToLower(strings.TrimSpace(v.Get("filter")))
	if len(q.Filter) > FilterMax {
		return Query{}, fmt.Errorf("%w: filter is %d characters long; a tenant id has at most %d", ErrQuery, len(q.Filter), FilterMax)
	}
	for _, c := range q.Filter {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return Query{}, fmt.Errorf("%w: filter %q: tenant ids hold only a-z, 0-9, - and _", ErrQuery, q.Filter)
		}
	}
	if p := v.Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return Query{}, fmt.Errorf("%w: page %q: want a number from 1", ErrQuery, p)
		}
		q.Page = n
	}
	return q, nil
}

// PartnerQuery picks the tenant of GET /ui/api/partners.
type PartnerQuery struct {
	// Tenant is the tenant whose partners to show; "" means the token's
	// own tenant (an admin token must name one).
	Tenant string
}

// ParsePartnerQuery reads a PartnerQuery from the parameters of GET
// /ui/api/partners: tenant, a tenant id, at most once. It returns
// ErrQuery, saying what is wrong, for anything else.
func ParsePartnerQuery(v url.Values) (PartnerQuery, error) {
	ts := v["tenant"]
	switch {
	case len(ts) > 1:
		return PartnerQuery{}, fmt.Errorf("%w: tenant given %d times; want one tenant id", ErrQuery, len(ts))
	case len(ts) == 0 || ts[0] == "":
		return PartnerQuery{}, nil
	}
	if len(ts[0]) > FilterMax {
		return PartnerQuery{}, fmt.Errorf("%w: tenant is %d characters long; a tenant id has at most %d", ErrQuery, len(ts[0]), FilterMax)
	}
	if err := events.ValidateTenant(ts[0]); err != nil {
		return PartnerQuery{}, fmt.Errorf("%w: tenant %q is not a tenant id: they hold only a-z, 0-9, - and _, and start with a letter or digit", ErrQuery, ts[0])
	}
	return PartnerQuery{Tenant: ts[0]}, nil
}
