// Package runner is the sink runtime: it consumes one destination's work
// items from stream WORK and applies them with a sink.Sink. cmd/sinks runs
// one Runner per process; any number of processes share the durable pull
// consumer of a destination (filter work.<destination>.>).
//
// # One work item
//
//  1. Fetch. The runner holds at most Config.Concurrency +
//     Config.ReadAhead items and fetches only as many as it has room for
//     (at most Config.FetchBatch). From the fetch on, it sends InProgress
//     every Config.InProgressEvery and extends the item's slot lease every
//     Config.ExtendEvery, so neither expires under a slow but live sink or
//     while the item waits for an apply slot.
//  2. Read. An item that carries its events' bodies (work.Item.Bodies) is
//     applied from them, nothing read from PRODUCTS; their headers are
//     read only when a dead letter or a log line needs them. Any other
//     item names a range of PRODUCTS sequences whose events are read with
//     batched direct gets (work.Reader.ReadItem: a dense range by
//     sequence, a shared one by subject). Events missing from the range
//     (aged out of PRODUCTS) become one KindRange dead letter; the rest are
//     applied. An event that does not decode is dead-lettered. Reading
//     needs no apply slot: with every apply busy, up to ReadAhead further
//     items are read, so an apply slot never waits for a read.
//  3. Apply, classify, retry. sink.Classify, with the sink's own rows, sorts
//     every failure: permanent → dead letter at once; transient → retry
//     with jittered exponential backoff (cenkalti/backoff/v4), at least the
//     Retry-After the destination asked for, until Backoff.MaxElapsed;
//     unknown → like transient until Config.MaxAttempts, then dead letter.
//     Every Apply call takes one of Config.Concurrency apply slots and
//     gives it back when it returns, so a record waiting out its backoff
//     does not hold one.
//     Per-record errors are handled per record: only the failing records
//     are retried or dead-lettered, their neighbours count as applied. The
//     slot stays held during retries, so a failing tenant or partner slows
//     only itself.
//  4. Finish. Dead letters are published (and acknowledged by JetStream),
//     the lease is released (fenced: a stale token changes nothing and is
//     logged; a failing release is retried for up to Config.ExtendEvery,
//     then left to the lease's expiry), and the item is acked — in that
//     order, after the last Apply, without an apply slot.
//
// Log lines about an item name it ("item", its WORK message id:
// lease/from-to) and the ingest request ids of the events concerned
// ("requests": the first three distinct ids of events.HeaderRequestID and
// their count), so a failure in a sink leads back to the request.
//
// # Failure cases
//
//   - A malformed work item is terminated (TermWithReason) and logged; it
//     never blocks the consumer.
//   - A lease found stale while retrying (the slot was taken again after
//     it expired, and the dispatcher re-dispatched the range under a newer
//     lease) stops the retries: the item is acked without release and the
//     remaining records are left to the newer lease. The attempt in flight
//     finishes; sinks are idempotent.
//   - A crash mid-item leaves the item unacked: JetStream redelivers it
//     after AckWait, and the redelivery applies it again (idempotently).
//   - The last delivery JetStream allows (Config.MaxDeliver) is not applied
//     but dead-lettered whole: an item that crashed its process that often
//     would otherwise be dropped silently.
//   - A panic in a sink is recovered and classified as unknown.
//
// # Shutdown
//
// When Run's context ends the runner stops fetching. Items waiting to
// retry or waiting for an apply slot are handed back at once (Nak, lease kept until it expires); items
// inside Apply get Config.ShutdownGrace to finish, then their context is
// cancelled and they are handed back. Nothing unfinished is acked or
// released.
package runner
