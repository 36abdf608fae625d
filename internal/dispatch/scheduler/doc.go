// Package scheduler is the dispatcher's scheduling core: it decides which
// tenant's events a destination gets next, by weighted deficit round robin
// over the (tenant, destination) pairs that have backlog, serving pairs that
// have just become active first. It is pure, deterministic logic with no
// I/O and no goroutines.
//
// # How the dispatcher uses it
//
// internal/dispatch keeps one Scheduler per destination and counts cost in
// events: Quantum is the destination's batch size (or --quantum), MaxBatch
// and LoneRounds allow a grant of up to GrantBatches batches. Its calls, in
// internal/dispatch/destination.go:
//
//	event delivered (doorbell or backfill)  SetBacklog(k, events after the cursor, weight)
//	start-up scan or a pair's reload        SetBacklog(k, backlog the server counted, weight)
//	loop, while grants in flight < Concurrency and WORK has room:
//	    g, ok := Next()                     // !ok: sleep until a wake-up
//	    cut at most min(g.MaxEvents, g.MaxCost) events into batches, then one
//	    statement takes a slot per batch and moves the cursor; after it:
//	        dispatched n                    SetBacklog(k, pending+n, weight); Done(k, n, n)
//	        at the slot limit               SetBlocked(k, true); Done(k, 0, 0)
//	        held (replay rate, a wait for   SetBlocked(k, true); Done(k, 0, 0), and
//	          the backfill or bodies, an    SetBlocked(k, false) when the hold ends
//	          error's retry delay)
//	        cursor moved (another           Done(k, 0, 0)
//	          dispatcher took the range)
//	    the grant's work items are published after Done: the tenant's next
//	    grant may begin while they go out
//	slot released (LISTEN/NOTIFY)           SetBlocked(k, false)
//	pair owned by another dispatcher        SetParked(k, true), false when it comes back
//
// Done with events 0 on a blocked key keeps its place and credit (a slot
// limit or a hold costs the tenant nothing); on an unblocked one it ends the
// key's turn. Grant.Allows is the rule for a caller that counts cost in
// another unit than events (bytes, say), where the cost of the next event
// is known only once it is read.
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
//   - New flows first (sparse-flow priority, as in FQ-CoDel, RFC 8290
//     sections 4.1-4.2, and DRR++). A key that becomes active — SetBacklog
//     after it had no backlog: a small tenant's event, say — joins the
//     tail of a third list, the new-flows list (in tiers, see below),
//     which Next serves before the rounds (the "old" list), provided it
//     has credit for the current round: it is not in debt, and it has not
//     had this round's quantum (it gets it there) or has some of it left
//     (it spends what is left).
//     A visit on the new-flows list is one quantum like any other: with
//     credit left after a full grant the key stays at the list's head; with
//     its quantum spent and backlog left it joins the tail of the next
//     round, as in normal DRR; emptied, it goes idle having had its turn.
//     So a key whose events arrive while N tenants are backlogged is
//     granted once the new flows ahead of it have been, not after a round
//     of the N tenants' quanta. A key blocked or parked while it waits on
//     the new-flows list returns to it when eligible again, if it still
//     has credit for the round then; one blocked after a grant from it
//     returns to it within the same round with what it has left, and in
//     a later round as if it had gone idle: a small tenant whose one slot
//     is busy when its next event comes is still a sparse flow when the
//     slot is freed, however long the floods' round.
//
//   - Lightest new flows first. The new-flows list is kept in tiers by
//     the share of its round's quantum a key will have spent once its
//     next grant is served: what it spent, plus that grant (its backlog,
//     at most MaxBatch and what is left of the quantum). One tier per
//     doubling from under 1/512 to the whole quantum (eleven tiers, each
//     in arrival order), and Next serves the lowest tier first. When
//     hundreds of tenants trickle in at once, every one of them is a new
//     flow at every return and a round can outlast the whole flood; when
//     many floods become active at once, each of them is a new flow whose
//     first grant takes a whole batch. In arrival order a small tenant
//     would wait behind a grant of each; here it goes before those that
//     will have spent more, in the finishing order of fair queuing (as
//     least-attained-service scheduling orders jobs, counting the grant
//     to come), at O(1) cost per operation. Shares are unchanged: the
//     order decides who goes first within a round, the quantum how much
//     each gets. A key whose backlog grows while it waits on the list
//     moves to the tail of the later tier it now belongs in (a flood that
//     became active with one event, as a small tenant did, goes behind
//     the tenants still waiting with a few); a key never moves to an
//     earlier tier. A key whose visit goes on (credit left after a full
//     grant from the list) stays at its head.
//
//   - No gain from going idle. RFC 8290 moves a queue emptied on the new
//     list to the tail of the old list instead of forgetting it, so that a
//     queue that empties and refills just often enough cannot come back
//     as new, with a fresh quantum, for ever and starve the old queues.
//     Here the guard is kept in credit rather than list position: an
//     idle key keeps what is left of its quantum until the round ends (the
//     next quantum replaces it) and keeps its debt; a return within the
//     round is served first only while that credit lasts, and a key that
//     comes back after spending its quantum, or in debt, waits in the
//     rounds like any other. A key that alternates idle and active is
//     therefore charged at most one quantum per round, as a backlogged one
//     is. Unlike RFC 8290's one new visit per pass of the old list, a key
//     that returns several times a round with a little each time — a
//     small tenant sending every few hundred milliseconds while a round of
//     200 floods takes seconds — is served first each time. Each such
//     return is a grant of its own: a key returning one event at a time
//     may take a grant per event until its quantum is spent (one at a
//     time, one grant per key), its cost still within its share.
//
//   - Blocked queues. A tenant at its slot limit is taken out of the lists
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
//     credit left after a full grant (MaxEvents dispatched) it resumes at
//     the head of its list (the new-flows list if its grant came from
//     there, else the round). After a short one it goes to the tail: its
//     backlog hint said more than it had, as it does for a tenant whose
//     events trickle in, and such a tenant at the head would take grant
//     after grant of a few events each until its quantum is spent.
//
//   - Lone rounds (optional, Config.LoneRounds, off by default): a key that
//     is alone when its visit begins — nothing else in any list, no other grant
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
//   - A key is in a list (new flows, current round or next round) if and
//     only if it has backlog, is not blocked or parked and has no grant
//     outstanding; Next examines only listed keys.
//   - A key receives at most one quantum per round, on whichever list, and
//     its credit never exceeds the credit granted at its latest visit (one
//     quantum, or several for a lone key); the next quantum replaces
//     positive credit, so none is hoarded while idle or blocked.
//   - Every key in the new-flows list has credit for the round, and a key
//     in the current list that has had this round's quantum has credit
//     left; so Next grants the first key it examines unless that key is
//     repaying an overdraft, and each such skip repays one quantum of cost
//     that was really dispatched: Next is O(1) amortised.
//   - The round moves on only when no key but the one being granted is on
//     the new-flows list, so a key on it is served in the round whose
//     credit it holds.
//   - A key that becomes active with credit for the round is granted before
//     any key in the rounds, after the keys ahead of it in the new-flows
//     list: those in lower tiers, and those of its tier that came first. Any other key that becomes dispatchable joins the current round
//     unless it already had this round's quantum, in which case it heads
//     for the next round; either way it is granted within one round.
//   - With every key continuously backlogged and unblocked, over R rounds a
//     key of weight w is charged w·Quantum·R, within one quantum plus one
//     event's overdraft; a key that goes idle and active again is charged
//     no more.
//
// # Concurrency
//
// A Scheduler is safe for concurrent use; each method holds one mutex for
// O(1) work. A dispatcher can keep several grants for different keys in
// flight.
package scheduler
