// Package dispatch is fairway's dispatcher: it moves each tenant's events
// from stream PRODUCTS to stream WORK, fairly across tenants and only inside
// the slot limits kept by pkg/tenancy. cmd/dispatcher runs it; the sinks
// consume what it publishes. docs/dispatcher.md is the operator's view.
//
// # One loop per destination and lane
//
// Every destination (postgres, clickhouse, b2b:<partner>) has two lanes,
// each with its own scheduler (weighted deficit round robin,
// internal/dispatch/scheduler) and its own loop, so a slow destination
// never delays another: the live lane, which the doorbell rings and which
// moves the pairs' cursors, and the replay lane, which dispatches
// operators' replays with the pairs' replay cursors and slots
// (tenancy.Rewind, tenancy.DispatchReplay), so that a tenant's live
// events never wait for its replay. A loop takes
// grants while fewer than Config.Concurrency grants are in flight; for a
// grant it
//
//  1. unless the tenant's gate holds it back (gate.go), takes up to the
//     grant's size of the tenant's events from its cursor out of the first
//     source that knows them (source.go): the index the doorbell keeps
//     (seq_index.go), a dense run, a replay feed, or, where none can tell,
//     a read with one batched direct get (internal/work Reader), and cuts
//     them into batches of at most the
//     destination's batch size (Config.BatchSize, or DestBatchSize: 5,000
//     for clickhouse; a grant holds up to Config.GrantBatches batches),
//  2. calls tenancy.DispatchMany: take a slot per batch while the tenant
//     has free ones, check the cursor, log the batches on their leases,
//     advance the cursor — one statement, one transaction, one round trip,
//  3. tells the scheduler what it dispatched and what is still pending
//     (batches that found no slot wait for a release), which ends the
//     grant: the tenant's next grant may begin while
//  4. it publishes one work item per batch that got a slot
//     (work.<dest>.<tenant>, Nats-Msg-Id with the lease token; retries are
//     duplicates JetStream drops). These pipelined grants keep a flood's
//     drain from being paced by its publishes' acks.
//
// ErrAtLimit blocks the tenant in the scheduler (it costs nothing and keeps
// its place) until a release wake-up (tenancy.Listen) unblocks it;
// ErrCursorMoved means another dispatcher won the range (no leader: the
// cursor check decides), and the tenant's cursor is reloaded.
//
// # Backlog discovery without per-tenant JetStream objects
//
// At start the dispatcher scans the partitions it reads (partitions.go:
// stream info with a subjects filter for the tenants, PostgreSQL for
// cursors and weights, one direct get per tenant and destination for the
// exact pending count) and follows them with an ordered consumer — the
// doorbell — from the sequence the scan started at: one on the whole
// stream, unfiltered, when it reads every partition, else one per
// partition. The doorbell and the grants start before the direct gets,
// for the tenants without events at the start; those the scan found join
// the rounds once their counts are in (survey, gate, probeAll, open).
// JetStream state is one ephemeral consumer per partition read (two while
// the backfill runs, plus one per pair it is replaying: replay_feed.go),
// on Deps.Doorbell when set, a connection of their own.
// The scan repeats every PollInterval as a fallback.
//
// # Cutting batches without reading the stream
//
// The doorbell delivers every event's sequence and subject anyway, so each
// destination keeps, per tenant, the sequences it delivered as runs of
// consecutive numbers (seq_index.go) and cuts a grant's batches from them
// without a direct get. At start a second ordered consumer, the backfill,
// delivers the existing backlog the same way (from the oldest event
// waiting to be dispatched, at most Config.Backfill sequences) and stops.
// The index is used only where it is exact: at or after the point its consumer started
// from and at or after what it has forgotten (runs dropped over
// indexMaxRuns, sequences behind the cursor), and for the live lane only.
// A replay is cut by arithmetic when the replayed range is all the tenant's, else
// served by its replay feed; everything else — a backlog older than the backfill
// reached, a tenant the index knows nothing more of — is read from
// PRODUCTS, which is always right. fairway_dispatcher_grants_total{source}
// counts each (index, feed, dense, read).
//
// # Carried bodies and a shallow WORK
//
// The doorbell delivers each event's body too; the index holds it within
// Config.BodyBudget (carried_body.go), and an item cut from the index
// carries its events (work.Item.Bodies), so its sink does not read
// PRODUCTS. Bodies past the budget are read again in stream order, once
// the grants have made room (body_refill.go). Each destination keeps what waits in WORK to about what its
// sinks take at once (work_window.go): grants wait while the sinks'
// consumer has enough pending, so the order of grants is the order of
// application and leases never expire on items that only wait.
//
// # Crash safety
//
// The commit (2) precedes the publish (4). A crash between them leaves a
// lease with a recorded batch that nobody extends. When it expires and
// anything ends it — Sweep, an acquisition reclaiming the slot, a late
// release — PostgreSQL records the batch as an orphan in the same statement
// (migration 00008). The recovery loop re-dispatches each orphan under a new
// lease (tenancy.Redispatch: new token, so a new Nats-Msg-Id), within the
// slot limit and exactly once across dispatchers. Shutdown hands unpublished
// batches back at once (tenancy.ReturnBatches). A sink that dies mid-batch
// is covered the same way. Nothing is skipped; a range may be applied twice,
// which idempotent sinks absorb.
//
// The words of this package (doorbell, backfill, refill, feed, dense, hold,
// park, window, grant) are explained in docs/dispatcher.md, "Glossary".
package dispatch
