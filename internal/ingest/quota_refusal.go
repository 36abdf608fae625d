package ingest

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Codes of a QuotaRefusal.
const (
	// CodeQuotaExceeded (429): the tenant is over a quota now; retry after
	// RetryAfter seconds.
	CodeQuotaExceeded = "quota_exceeded"
	// CodeOverQuotaBurst (413): the request is larger than the quota's
	// burst, so it never fits; split it.
	CodeOverQuotaBurst = "over_quota_burst"
)

// QuotaRefusal is the body of an events request that a tenant's quota
// refused: 429 with a Retry-After header, or 413 when the request is
// larger than the quota's burst. Nothing of the request was stored.
type QuotaRefusal struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Quota names the quota: events_per_sec, bytes_per_sec or max_backlog.
	Quota tenancy.QuotaKind `json:"quota"`
	// Value is its setting: events per second, payload bytes per second,
	// or the most events that may wait.
	Value int64 `json:"value"`
	// Burst is the rate quota's burst.
	Burst int64 `json:"burst,omitempty"`
	// Backlog is the tenant's events waiting for its slowest destination
	// (max_backlog).
	Backlog uint64 `json:"backlog,omitempty"`
	// RetryAfter is the Retry-After header's seconds (429).
	RetryAfter int    `json:"retry_after,omitempty"`
	RequestID  string `json:"request_id"`
}

// writeQuotaRefusal answers an events request of events events and bytes
// payload bytes that ref refused, and counts it.
func (s *Server) writeQuotaRefusal(w http.ResponseWriter, r *http.Request, tenant string, events, bytes int64, ref *quotaRefusal) {
	s.metrics.QuotaRefusals.WithLabelValues(string(ref.kind)).Inc()
	body := QuotaRefusal{Code: CodeQuotaExceeded, Quota: ref.kind, Value: ref.value, Burst: ref.burst, Backlog: ref.backlog,
		RequestID: requestID(r.Context())}
	if ref.never {
		body.Code = CodeOverQuotaBurst
		what := fmt.Sprintf("%d events", events)
		if ref.kind == tenancy.QuotaBytesPerSec {
			what = fmt.Sprintf("%d payload bytes", bytes)
		}
		body.Error = fmt.Sprintf("this request's %s exceed tenant %s's %s burst of %d; split the batch (nothing was stored)",
			what, tenant, ref.kind, ref.burst)
		writeJSON(w, http.StatusRequestEntityTooLarge, body)
		return
	}
	wait := ref.wait
	if ref.kind == tenancy.QuotaMaxBacklog {
		wait = s.cfg.BacklogRetryAfter
	}
	body.RetryAfter = retryAfterSeconds(wait)
	body.Error = fmt.Sprintf("tenant %s is over its %s quota (%s); retry after %ds (nothing was stored)",
		tenant, ref.kind, ref.describe(), body.RetryAfter)
	w.Header().Set("Retry-After", strconv.Itoa(body.RetryAfter))
	writeJSON(w, http.StatusTooManyRequests, body)
}

// retryAfterSeconds rounds d up to whole seconds, at least 1, as
// Retry-After counts.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
