// Package work is the hand-off between the dispatcher and the sinks.
//
// The dispatcher, holding a slot lease for (tenant, destination), publishes
// an Item to stream WORK on work.<destination>.<tenant>. The Item names a
// range of PRODUCTS sequences. When the dispatcher received the events
// themselves (its doorbell delivers each event once, in stream order), the
// Item carries them (Item.Bodies, in a binary form: body.go) and sinks
// apply them without reading PRODUCTS. Otherwise (orphans re-dispatched
// from the batch log, events the dispatcher did not keep) sinks read the
// events back from PRODUCTS with batched direct gets (Reader).
// Nats-Msg-Id is Item.MsgID(), which includes the
// lease (slot and fencing token): a re-sent Item (a dispatcher retrying its own
// publish) is a duplicate JetStream drops, while a replay of the same range
// under a new lease is new work.
//
// WORK uses work-queue retention: a message is gone once a sink acked it,
// and each destination has its own durable consumer (filter
// work.<destination>.>), so the filters never overlap.
package work
