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
// Redrive sends an event letter's event back to the destination whose
// letter it is, and to no other (Queue.Redrive). Per (tenant, destination)
// it takes a slot in PostgreSQL as a dispatcher does (tenancy
// AcquireBatch: the slot limit, pauses and stream-reset holds apply, and
// the lease records the events' range, so that a lease that expires
// unreleased leaves an orphan a dispatcher dispatches again), publishes
// one work item to WORK on work.<dest>.<tenant> that carries the events
// (work.Item.Redrive, under the sequences PRODUCTS stored them at), and
// deletes the letters once WORK has stored it. The destination's sinks
// apply it like any work item and release the slot. Consequences, chosen
// on purpose:
//
//   - The other destinations, which applied the event, never see it again;
//     PRODUCTS is not written to.
//   - The item carries the events, so a redrive works after PRODUCTS has
//     dropped them (MaxAge). A sink does not look their headers up in
//     PRODUCTS, whose sequences may name other events by then; an event
//     that fails again is a new letter (Letter.Redriven, its Nats-Msg-Id
//     names the redrive's lease), not a duplicate the DLQ would drop.
//   - The event keeps its version: if a newer version was applied since,
//     the redriven one changes nothing (the Order invariant).
//   - A redrive interrupted between the publish and the deletes and run
//     again sends the events again under a new lease: applied twice, which
//     idempotent sinks absorb (B2B partners get the same version again,
//     as at-least-once delivery allows).
package dlq
