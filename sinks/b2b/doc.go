// Package b2b is the B2B partner webhook sink: it POSTs each tenant's
// product events, signed, to the partners the tenant registered, with
// per-endpoint flow control. Partners live in PostgreSQL
// (fairway.partners, managed with Registry and `fairway partners`); one
// Sink serves one partner (destination "b2b:<partner>") for every tenant
// that has it, looking each tenant's settings up in the Registry (cached
// for Config.PartnerCacheTTL, or until a change notifies: FollowChanges).
//
// # Requests
//
// Per tenant in a batch, the sink sends the newest version of each product
// (older versions in the same batch are superseded and count as applied;
// events whose op the partner filters out count as applied too) as one
// POST of a Body, signed with the partner's Signing: SigningStandard
// (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature),
// the default, or SigningFairway (Idempotency-Key, X-Fairway-Timestamp,
// X-Fairway-Signature). During a secret rotation (Registry.RotateSecret)
// each request carries a second signature under the previous secret until
// Partner.PreviousSecretUntil. docs/partners.md is the partner's manual:
// the headers, verifying them with the reference libraries, moving a
// partner between schemes.
//
// A partner's Transform (Registry.SetTransform) filters and maps its
// events: two CEL expressions over the event, checked when they are set
// and compiled once per change by each Sink. An event the filter drops
// counts as applied; the map's value takes the event's place in
// Body.events; an event either fails on is a permanent record error
// wrapping ErrTransform with CEL's message, and the rest of the batch is
// delivered. transform_values.go and transform_payload.go read the
// payload's fields in place instead of decoding it, the fields the
// expressions name in one pass, and a large batch is mapped on every
// core.
//
// A batch is split into several requests when its body would exceed the
// partner's max request size, or hold more than its MaxEvents (1: one
// event per request); an event too large on its own is reported as a
// permanent record error (ErrEventTooLarge). Events are ordered by
// product id; "version" orders changes to one product, and a partner must
// ignore a version older than the one it holds (requests can be retried,
// replayed and, across several sink processes, reordered).
//
// The idempotency key (webhook-id, or Idempotency-Key) is a hash of the
// tenant, the partner and the stream sequences of the events in the
// request: every retry of the same events carries the same key (a new
// timestamp and signature), and two different sets of events never share
// one. A replay of the same range reuses the keys, so a partner that
// stores keys treats it as a duplicate.
//
// Signing.Verify is the check a partner runs, in Go, for either scheme;
// b2btest's receiver uses it.
//
// # Answers and classification
//
// Any 2xx is success; its body is not read beyond Config.MaxResponseBytes
// (64 KiB) and not interpreted. Every other answer is an *HTTPError holding
// at most MaxErrorBody bytes of the body. The runtime classifies the
// sink's errors with internal/sink.Classify: HTTPError is a sink.HTTPError,
// so the generic rows judge its status (408, 425, 429, 5xx transient; 400,
// 401, 403, 404, 410, 413, 422 permanent; any other unknown, retried up to
// the runtime's attempt limit), and the sink adds its own rows
// (Sink.ClassifyRules, classify.go): an open breaker, a Retry-After in
// force, a disabled partner, a secret that cannot be decrypted and an
// untrusted certificate are transient. HTTPError and RetryAfterError carry
// the wait (sink.Delayed).
//
// 400, 413 and 422 are about the events: the sink bisects the request
// (sink.ApplyLatest) until the refused events are isolated, reports them as
// *sink.PermanentError, and delivers their neighbours. A partner that
// refuses everything with 400 therefore costs about 2n requests for n
// events before they are all dead-lettered. 401, 403, 404 and 410 are about
// the partner (wrong secret, endpoint gone): the batch error is permanent
// and the runtime dead-letters the batch, to be replayed once the partner
// is fixed, rather than retrying forever.
//
// # Delivery log
//
// Every request attempt (time, idempotency key, events, status, latency,
// error) goes to fairway.partner_deliveries through a buffer of
// Config.DeliveryLogBuffer rows and one background writer, which inserts
// what has queued in one statement and trims each partner's log to its
// newest Config.DeliveryLogKeep rows (1000). A delivery never waits for
// the log: a row that finds the buffer full is dropped and counted.
// Registry.Deliveries lists the log with each attempt's retry count;
// Registry.DeliveryStats sums up a partner's success rate and last error.
//
// # Flow control
//
// Each endpoint (scheme://host:port of a partner URL) has a circuit
// breaker in the Sink: after Config.FailureThreshold (5) consecutive
// failures it opens for Config.CoolDown (30s); then one probe
// goes through (half-open) and its success closes the breaker, its failure
// opens it again. A permanent answer (400, 401, 403, 404, 410, 413, 422)
// proves the endpoint is up and resets the count; any other failure
// counts. A Retry-After (seconds or HTTP-date, on a transient answer) blocks
// the endpoint until it passes. While blocked, Apply returns at once,
// without a request, a *RetryAfterError (ErrCircuitOpen or ErrRetryAfter)
// whose Wait tells the runtime when to come back. The breaker is keyed by
// endpoint, not by partner name, because tenants may register the same
// partner at different endpoints: one tenant's broken endpoint must not
// stop another's. Breakers live in one process; every sink replica keeps
// its own. Sink.State and Sink.Breakers report them.
//
// A slow or failing partner holds only its own requests: every request has
// the partner's timeout (default 10s), sinks for different partners share
// nothing, and within one Sink endpoints share only the connection pool
// (Config.MaxIdleConnsPerHost idle connections kept per host).
//
// # Secrets
//
// A Secret formats as "[redacted]" everywhere (fmt, slog, JSON); Partner
// prints its URL without query or user info; errors name the URL the same
// way. Registry.List never returns secrets. With RegistryConfig.SecretKey
// (the CLI and services read it from FAIRWAY_SECRET_KEY: 32 bytes as 64
// hex digits or base64) secrets are encrypted at rest with AES-256-GCM,
// bound to their tenant and partner as additional data, so a row copied
// elsewhere does not decrypt. Without the key they are stored as given —
// protected only by database access control — and still never printed.
// Rows stored before a key was set stay readable and are re-encrypted by
// their next Update. Rotating the key itself means re-adding the secrets.
//
// TLS certificates are always verified (Config.TLSConfig may add a CA, and
// InsecureSkipVerify is ignored). http:// URLs are accepted only by a
// Registry with AllowInsecureHTTP (tests, the demo).
//
// b2btest holds a real HTTP receiver for tests and the demo.
package b2b
