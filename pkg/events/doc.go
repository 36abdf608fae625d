// Package events is fairway's public event model: what a product event is,
// the rules it must follow, how it is named and stored in JetStream, and a
// client that publishes events. Upstream Go programs import it to publish;
// fairway's ingest, dispatcher and sinks import it to decode.
//
// # Event
//
// An Event is one change (OpUpsert or OpDelete) to one product of one
// tenant, ordered by Version. Event.Validate enforces the model; every
// problem is a *ValidationError whose message reads as a sentence
// ("version is required", `op "upsrt" is not one of upsert, delete`,
// "payload is 300000 bytes, limit 262144") and which is ErrInvalidEvent.
//
// # Storage
//
// Events live in the stream PRODUCTS (EnsureStream) on the subject
// products.<tenant>.<op> (Subject). A tenant id is one subject token
// (ValidateTenant: ^[a-z0-9][a-z0-9_-]{0,62}$), so it can never add tokens
// or wildcards. The message body is the event's JSON, tenant included.
// Headers are kept to what is needed: Nats-Msg-Id is Event.MsgID(), the
// idempotency key scoped to the tenant, so that JetStream drops a tenant's
// repeat inside the stream's duplicate window and nothing else, and
// Fairway-Request-Id traces a request; the stream's own timestamp is the
// publish time. Decode reads a stored body back.
//
// Note on durability: file storage does not fsync each message by default.
// A single node killed hard can lose acknowledged events; production runs
// the stream with 3 replicas.
//
// # Ingest bodies
//
// A Decoder reads a request body, a JSON array (application/json) or NDJSON
// (application/x-ndjson), one item at a time (a Decoded: the event or why
// it was rejected) without holding the body in memory. A bad item is
// reported with its position and the rest still decode; see Decoder for
// the exact rules (unknown fields are errors, missing occurred_at means
// now, a broken JSON array ends the body).
//
// # Publishing
//
// A Publisher validates events, publishes the valid ones asynchronously
// within a bounded window and returns one Result per event after JetStream
// has acknowledged each. Pass a request id with ContextWithRequestID.
package events
