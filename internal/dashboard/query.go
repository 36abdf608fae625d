package dashboard

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
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
