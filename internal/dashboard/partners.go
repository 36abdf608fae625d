package dashboard

import (
	"context"
	"net/http"
	"time"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

// PartnerSource sums up the delivery log of each B2B partner of a tenant;
// *b2b.Registry is one. The dashboard always names the tenant: the
// registry reads every tenant for "".
type PartnerSource interface {
	DeliveryStats(ctx context.Context, tenant string) ([]b2b.DeliveryStats, error)
}

// PartnerList is what GET /ui/api/partners returns: how the requests to
// each B2B partner of one tenant went, over the attempts its delivery log
// keeps. Partners without a logged attempt are not listed.
type PartnerList struct {
	// GeneratedAt is when the log was read: the page counts the age of
	// the last attempt and error from it, not from the viewer's clock.
	GeneratedAt time.Time    `json:"generated_at"`
	Tenant      string       `json:"tenant"`
	Partners    []PartnerRow `json:"partners"`
	// Error is set when the log could not be read.
	Error string `json:"error,omitempty"`
}

// PartnerRow is one partner, from b2b.DeliveryStats.
type PartnerRow struct {
	Partner     string  `json:"partner"`
	Attempts    int     `json:"attempts"`
	Succeeded   int     `json:"succeeded"`
	SuccessRate float64 `json:"success_rate"`
	// LastAt is when the newest attempt was sent; LastFailed whether it
	// failed. The page draws a partner in red only then: LastError may
	// be old.
	LastAt     time.Time `json:"last_at"`
	LastFailed bool      `json:"last_failed"`
	// LastError and LastErrorAt are the newest failed attempt's; absent
	// when none failed.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

func partnerRow(s b2b.DeliveryStats) PartnerRow {
	r := PartnerRow{Partner: s.Partner, Attempts: s.Attempts, Succeeded: s.Succeeded, SuccessRate: s.SuccessRate(),
		LastAt: s.LastAt, LastFailed: s.LastFailed, LastError: s.LastError}
	if !s.LastErrorAt.IsZero() {
		at := s.LastErrorAt
		r.LastErrorAt = &at
	}
	return r
}

// servePartners answers GET /ui/api/partners?tenant=<id>: an admin token
// (or anyone, without Deps.Tokens) names the tenant; a tenant token sees
// its own partners, with or without naming itself, and is refused any
// other tenant's.
func (d *Dashboard) servePartners(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	own, ok := d.viewer(w, r)
	if !ok {
		return
	}
	if d.partners == nil {
		writeJSON(w, http.StatusNotFound, apiError{Error: "this dashboard has no partner source", Code: "not_found"})
		return
	}
	q, err := ParsePartnerQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error(), Code: "invalid_query"})
		return
	}
	tenant := q.Tenant
	switch {
	case own != "" && tenant == "":
		tenant = own
	case own != "" && tenant != own:
		writeJSON(w, http.StatusForbidden, apiError{Error: "a tenant token sees its own tenant's partners only", Code: "forbidden"})
		return
	case tenant == "":
		writeJSON(w, http.StatusBadRequest, apiError{Error: ErrQuery.Error() + ": tenant is required: partners are shown one tenant at a time", Code: "invalid_query"})
		return
	}
	list, ok := d.partnerList(r.Context(), tenant, own != "")
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, list)
}

// partnerList reads tenant's delivery log summary. A failed read's cause
// goes to the log and, unless hideCause, to the answer.
func (d *Dashboard) partnerList(ctx context.Context, tenant string, hideCause bool) (PartnerList, bool) {
	list := PartnerList{GeneratedAt: d.cfg.Now(), Tenant: tenant, Partners: []PartnerRow{}}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	stats, err := d.partners.DeliveryStats(ctx, tenant)
	if err != nil {
		d.cfg.Logger.Warn("dashboard: read partner deliveries", "tenant", tenant, "err", err)
		list.Error = "read partner deliveries: " + err.Error()
		if hideCause {
			list.Error = "partner deliveries unavailable; the server's log says why"
		}
		return list, false
	}
	for _, s := range stats {
		if s.Tenant == tenant {
			list.Partners = append(list.Partners, partnerRow(s))
		}
	}
	return list, true
}
