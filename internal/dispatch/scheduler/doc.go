// Package scheduler is the dispatcher's scheduling core: it decides which
// tenant's events a destination gets next, by weighted deficit round robin
// over the (tenant, destination) pairs that have backlog. It is pure,
// deterministic logic with no I/O and no goroutines; the dispatcher drives
// one Scheduler per destination from its loop:
//
//	doorbell: tenant has events behind its cursor -> SetBacklog(k, n, weight)
//	slot limit reached / slot released            -> SetBlocked(k, true/false)
//	g, ok := Next()                               // nothing dispatchable: wait for a doorbell or a release
//	take a slot for g.Key (on failure: SetBlocked(g.Key, true); Done(g.Key, 0, 0))
//	read events while g.Allows(taken, spent, cost(next event)); hand off the batch
//	Done(g.Key, eventsRead, costRead)
//
// # Algorithm
//
// Classic deficit round robin (M. Shreedhar and G. Varghese, "Efficient
// Fair Queuing using Deficit Round Robin", SIGCOMM 1995) visits the
// backlogged queues in a ring; on each visit a queue's deficit counter grows
// by a quantum and the queue sends packets while their size fits the
// deficit; what is left carries to the next visit, and an emptied queue's
// deficit is reset. Over time every backlogged queue sends in proportion to
// its quantum, at O(1) work per packet, whatever the packet sizes.
//
// Here a queue is a tenant's stream for the destination, a "packet" is a
// batch of events, and the adaptations are:
//
//   - Weights. A tenant of weight w earns w·Quantum per round. A visit may
//     span several grants, each at most Config.MaxBatch events, until the
//     credit is spent. With the defaults (cost = events, Quantum = MaxBatch
//     = 500) a weight-w tenant gets w full batches per round.
//
//   - Cost units. Credit and charges are in a unit the dispatcher picks and
//     uses consistently: events (default) or bytes, when event sizes vary
//     and fairness should follow the work a sink does. The dispatcher does
//     not know an event's cost before reading it, so a batch stops before
//     exceeding Grant.MaxCost but always holds one event; credit may go
//     negative by that last event (overdraft, as in Linux's fq_codel DRR)
//     and the debt is repaid from later quanta, so long-run shares still
//     follow the weights.
//
//   - Two lists instead of a ring. The current round's list holds the keys
//     still to visit, in order; the next round's list holds keys that have
//     had their quantum. When the current list empties the lists swap and
//     the round number grows. Each key records the round of its latest
//     quantum and gets at most one quantum per round.
//
//   - Blocked queues. A tenant at its slot limit is taken out of both lists
//     (O(1), intrusive doubly-linked lists), so Next never looks at it and
//     it is charged nothing. It keeps its round and the credit left from its
//     latest quantum: unblocked in the same round it rejoins that round with
//     what it had left; unblocked later it joins the round in progress and
//     gets one fresh quantum, its old positive credit dropped. It cannot
//     gain share by blocking often, nor hoard credit while blocked, nor lose
//     its place.
//
//   - One grant per key at a time. A granted key is out of the lists until
//     Done, so two batches of one tenant are never read concurrently; with
//     credit left after Done it resumes at the head of the round.
//
//   - Lone rounds (optional, Config.LoneRounds, off by default): a key that
//     is alone when its visit begins — nothing else listed, no other grant
//     outstanding — may take several rounds' quanta at once (within
//     MaxBatch). Those are rounds nobody else competes for, so shares are
//     unchanged, and a key that arrives during the grant is served before
//     the lone key's next one. The dispatcher uses it so that a tenant
//     draining a backlog alone is served in fewer, larger grants.
//
//   - Dampening (optional, off by default): a tenant that dispatched more
//     than Threshold events within the sliding Window earns its quantum at
//     weight max(weight/Factor, MinWeight) until the window has passed, the
//     sliding-window idea of sidekiq-fair-tenant applied to the weight.
//
// # Invariants
//
//   - A key is in a round list if and only if it has backlog, is not blocked
//     and has no grant outstanding; Next examines only listed keys.
//   - A key receives at most one quantum per round, and its credit never
//     exceeds the credit granted at its latest visit (one quantum, or
//     several for a lone key): no credit is hoarded while idle or blocked.
//   - A key in the current list that has had this round's quantum has
//     credit left; so Next grants the first key it examines unless that key
//     is repaying an overdraft, and each such skip repays one quantum of
//     cost that was really dispatched: Next is O(1) amortised.
//   - A key that becomes dispatchable joins the current round unless it
//     already had this round's quantum, in which case it heads for the next
//     round; either way it is granted within one round. In particular, with
//     the defaults, a tenant arriving behind another's 1M-event backlog waits
//     for at most ⌈weight⌉ of that tenant's batches.
//   - With every key continuously backlogged and unblocked, over R rounds a
//     key of weight w is charged w·Quantum·R, within one quantum plus one
//     event's overdraft.
//
// # Concurrency
//
// A Scheduler is safe for concurrent use; each method holds one mutex for
// O(1) work. A dispatcher can keep several grants for different keys in
// flight.
package scheduler
