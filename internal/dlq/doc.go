// Package dlq is fairway's dead-letter queue: the JetStream stream DLQ,
// where the sink runtime puts what it will not retry, and the operations
// `fairway dlq list|show|redrive|rm` run on it.
//
// A Letter is stored on dlq.<destination>.<tenant>. There are two kinds:
//
//   - KindEvent: one event a destination refused (or that kept failing
//     until the runtime gave up). The data is the original event exactly as
//     PRODUCTS stored it, the original Fairway-* headers are kept, and the
//     Fairway-Dlq-* headers say why: reason, class, rule, attempts, first
//     and last failure, source stream, sequence and subject.
//   - KindRange: events that were lost before any sink saw them — a work
//     item's range held fewer events than dispatched because PRODUCTS'
//     limits (MaxAge, MaxBytes) removed them. The data is the work item;
//     nothing can be redriven, the letter is the record of the loss.
//
// Nats-Msg-Id of an event letter is dlq/<dest>/<stream>/<seq>, so a work
// item redelivered after a crash (or applied again after a re-dispatch)
// does not dead-letter the same event twice inside the duplicate window.
//
// # Redrive
//
// Redrive republishes an event letter's event into PRODUCTS with a fresh
// idempotency key, "redrive:<dlq-seq>:<dlq-time>", and then deletes the
// letter. The event then takes the normal fair, slot-limited path to every
// destination. Three consequences, chosen on purpose:
//
//   - The original key would be dropped by PRODUCTS' duplicate window if
//     the event failed recently; a fresh key is not. The key is derived
//     from the letter, so a redrive interrupted between publish and delete
//     and run again publishes a duplicate that JetStream drops.
//   - Destinations that had applied the event see it again. Sinks are
//     idempotent by (tenant, product, version), so PostgreSQL and
//     ClickHouse change nothing; B2B partners get the same version again,
//     which they must tolerate anyway (at-least-once delivery).
//   - The event keeps its version: if a newer version was applied since,
//     the redriven one changes nothing (the Order invariant).
package dlq
