// Package ingest is fairway's HTTP entry for upstream systems. It accepts
// batches of product events for one tenant (a JSON array or NDJSON),
// validates each event, publishes the valid ones to the PRODUCTS stream and
// answers only after JetStream has acknowledged every accepted event, with
// one result per input event. CSV catalog uploads become import jobs that
// are spooled to disk, validated and published in the background and
// tracked in PostgreSQL. Tenants' quotas (events/s, bytes/s, backlog)
// refuse requests with 429 and slow imports down (quotaGate).
//
// Status codes of POST /v1/tenants/{tenant}/events:
//
//	202 Accepted        every event was stored (duplicates count as stored)
//	207 Multi-Status    some events were stored, some were not; see results
//	400 Bad Request     the body is not a JSON array / NDJSON stream, or the tenant id is invalid
//	401 Unauthorized    no or unknown bearer token
//	403 Forbidden       the token belongs to another tenant
//	413 Content Too Large  body or event count over the limit, or more events (payload bytes) than
//	                    the tenant's quota burst; nothing was stored
//	415 Unsupported Media Type  content type is neither JSON nor NDJSON
//	422 Unprocessable   every event was rejected by validation; nothing was stored
//	429 Too Many Requests  over one of the tenant's quotas (QuotaRefusal, Retry-After); nothing was stored
//	503 Service Unavailable  JetStream did not acknowledge any event; retry (idempotency keys make it safe)
//
// cmd/ingest wires it to real servers; the fairway demo runs it in process.
package ingest
