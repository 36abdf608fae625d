package ingest

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fairwayhq/fairway/pkg/events"
)

// EventResult is the outcome of one input event, in input order.
type EventResult struct {
	Index     int    `json:"index"`
	Line      int    `json:"line,omitempty"`
	Seq       uint64 `json:"seq,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

// EventsResponse is the body of a POST /v1/tenants/{tenant}/events answer.
type EventsResponse struct {
	Accepted   int           `json:"accepted"`
	Duplicates int           `json:"duplicates"`
	Rejected   int           `json:"rejected"`
	Failed     int           `json:"failed"`
	Results    []EventResult `json:"results"`
	RequestID  string        `json:"request_id"`
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	tenant, ok := pathTenant(w, r)
	if !ok {
		return
	}
	if _, ok := s.authorize(w, r, tenant); !ok {
		return
	}
	format, err := events.FormatFromContentType(r.Header.Get("Content-Type"))
	if err != nil {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Sprintf("%v; send application/json (an array of events) or application/x-ndjson (one event per line)", err))
		return
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", s.bodyLimitMsg())
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := events.NewDecoder(body, format, events.DecodeOptions{
		Tenant:    tenant,
		Limits:    s.cfg.Limits,
		MaxEvents: s.cfg.MaxEvents,
		Now:       s.cfg.Clock,
	})

	// The whole (bounded) body is decoded before anything is published, so
	// a 413 or a broken body means nothing of this request was stored.
	var items []events.Decoded
	for {
		it, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", s.bodyLimitMsg())
			case errors.Is(err, events.ErrTooManyEvents):
				writeError(w, http.StatusRequestEntityTooLarge, "too_many_events",
					fmt.Sprintf("more than %d events in one request; split the batch (nothing was stored)", s.cfg.MaxEvents))
			default:
				writeError(w, http.StatusBadRequest, "malformed_body", fmt.Sprintf("cannot read body: %v (nothing was stored)", err))
			}
			return
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		writeError(w, http.StatusBadRequest, "empty_body", "no events in body")
		return
	}
	if _, err := s.deps.Tenants.EnsureTenant(r.Context(), tenant); err != nil {
		s.log.ErrorContext(r.Context(), "ensure tenant", "tenant", tenant, "err", err, "request_id", requestID(r.Context()))
		writeError(w, http.StatusServiceUnavailable, "unavailable", "tenant registry unavailable; retry")
		return
	}

	resp := EventsResponse{Results: make([]EventResult, len(items)), RequestID: requestID(r.Context())}
	valid := make([]events.Event, 0, len(items))
	validIdx := make([]int, 0, len(items))
	for i, it := range items {
		resp.Results[i] = EventResult{Index: it.Index, Line: it.Line}
		if it.Err != nil {
			resp.Results[i].Error = it.Err.Error()
			resp.Rejected++
			continue
		}
		valid = append(valid, it.Event)
		validIdx = append(validIdx, i)
	}
	if len(valid) > 0 {
		// The quotas are checked, and their tokens taken, before any
		// event is published: a refused request stores nothing.
		n, bytes := int64(len(valid)), payloadBytes(valid)
		ref, err := s.quotas.admit(r.Context(), tenant, n, bytes, false)
		if err != nil {
			s.log.ErrorContext(r.Context(), "check quota", "tenant", tenant, "err", err, "request_id", resp.RequestID)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "could not check the tenant's quota; retry (nothing was stored)")
			return
		}
		if ref != nil {
			s.writeQuotaRefusal(w, r, tenant, n, bytes, ref)
			return
		}
		start := s.cfg.Clock()
		pctx, span := s.startPublish(events.ContextWithRequestID(r.Context(), resp.RequestID), tenant, len(valid))
		results := s.deps.Publisher.Publish(pctx, valid)
		endPublish(span, results)
		s.metrics.PublishLatency.Observe(s.cfg.Clock().Sub(start).Seconds())
		for j, res := range results {
			out := &resp.Results[validIdx[j]]
			switch {
			case res.Err != nil && errors.Is(res.Err, events.ErrInvalidEvent):
				out.Error = res.Err.Error()
				resp.Rejected++
			case res.Err != nil:
				out.Error = "not stored: " + res.Err.Error()
				resp.Failed++
			default:
				out.Seq, out.Duplicate = res.Seq, res.Duplicate
				resp.Accepted++
				if res.ForeignDuplicate != 0 {
					s.log.Warn("an event's id was held by another tenant's message; stored under an id of its own",
						"tenant", tenant, "msg_id", valid[j].MsgID(), "other_seq", res.ForeignDuplicate, "seq", res.Seq)
				}
				if res.Duplicate {
					resp.Duplicates++
				}
			}
		}
	}
	s.quotas.stored(tenant, resp.Accepted-resp.Duplicates)
	s.metrics.Events.WithLabelValues("accepted").Add(float64(resp.Accepted - resp.Duplicates))
	s.metrics.Events.WithLabelValues("duplicate").Add(float64(resp.Duplicates))
	s.metrics.Events.WithLabelValues("rejected").Add(float64(resp.Rejected))
	s.metrics.Events.WithLabelValues("failed").Add(float64(resp.Failed))

	status := http.StatusAccepted
	switch {
	case resp.Accepted == len(items):
	case resp.Accepted > 0:
		status = http.StatusMultiStatus
	case resp.Failed > 0:
		w.Header().Set("Retry-After", "1")
		status = http.StatusServiceUnavailable
	default:
		status = http.StatusUnprocessableEntity
	}
	if resp.Failed > 0 {
		s.log.WarnContext(r.Context(), "events not acknowledged by JetStream", "tenant", tenant, "failed", resp.Failed, "accepted", resp.Accepted, "request_id", resp.RequestID)
	}
	writeJSON(w, status, resp)
}

// payloadBytes is what evs count against a bytes_per_sec quota.
func payloadBytes(evs []events.Event) int64 {
	var n int64
	for _, e := range evs {
		n += int64(len(e.Payload))
	}
	return n
}

func (s *Server) bodyLimitMsg() string {
	return fmt.Sprintf("request body exceeds %d bytes; split the batch (nothing was stored)", s.cfg.MaxBodyBytes)
}
