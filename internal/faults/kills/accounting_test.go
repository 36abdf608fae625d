package kills_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// product names one product of one tenant.
type product struct{ tenant, id string }

// latest is what a destination holds as the current state of a product.
type latest struct {
	version int64
	deleted bool
	payload int64 // the payload's "v" (postgres only; -1 when not read)
}

// report is one accounting pass: what is wrong, and the figures.
type report struct {
	problems []string
	more     int // problems not listed

	accepted      int
	deadLetters   int                     // letters in the DLQ stream
	deadLettered  map[string]int          // dest → accepted events dead-lettered
	checked       map[string]int          // dest → accepted events applied (or superseded) there
	lost          map[string]map[key]bool // dest → accepted events neither applied there nor dead-lettered
	chRawRows     int                     // product_events rows before dedup
	chDupRows     int                     // rows beyond one per (tenant, product, version)
	b2bDelivered  int                     // distinct accepted events the partner received
	b2bDuplicates int                     // deliveries of an event beyond its first
	b2bCoalesced  int                     // accepted versions superseded inside one batch, never posted
	b2bDupKeys    int                     // idempotency keys the partner accepted more than once
	redispatched  int                     // ranges dispatched more than once (recovery)
	batches       int                     // rows in the batch log
}

func (r *report) loses(dest string, k key) {
	if r.lost[dest] == nil {
		r.lost[dest] = map[key]bool{}
	}
	r.lost[dest][k] = true
}

// losesAbove marks the versions of p above have that were not
// dead-lettered as lost in dest.
func (r *report) losesAbove(dest string, p product, versions []int64, have int64, dead map[key]bool) {
	for _, v := range versions {
		if k := (key{p.tenant, p.id, v}); v > have && !dead[k] {
			r.loses(dest, k)
		}
	}
}

func (r *report) problem(format string, args ...any) {
	if len(r.problems) >= 40 {
		r.more++
		return
	}
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// account compares every destination with the events ingest acknowledged.
// final adds what is too slow to poll: every request the partner received.
func (c *cluster) account(ctx context.Context, l *ledger, final bool) *report {
	acc := l.snapshot()
	r := &report{accepted: len(acc), deadLettered: map[string]int{}, checked: map[string]int{}, lost: map[string]map[key]bool{}}
	dead := c.deadLetters(ctx, l, r)
	versions := map[product][]int64{} // accepted versions per product, ascending
	maxSeq := map[[2]string]uint64{}  // per tenant and priority
	for k, a := range acc {
		p := product{k.tenant, k.product}
		versions[p] = append(versions[p], k.version)
		maxSeq[[2]string{k.tenant, a.prio}] = max(maxSeq[[2]string{k.tenant, a.prio}], a.seq)
	}
	for _, vs := range versions {
		slices.Sort(vs)
	}
	for _, d := range dests {
		for k := range dead[d] {
			if _, ok := acc[k]; ok {
				r.deadLettered[d]++
			}
		}
	}

	// PostgreSQL: catalog.products at the newest version of each product.
	if pg, err := c.postgresLatest(ctx); err != nil {
		r.problem("postgres: %v", err)
	} else {
		c.checkLatest(r, "postgres", acc, versions, dead["postgres"], pg)
	}
	// ClickHouse: product_events holds exactly the accepted events after
	// dedup; products_latest the newest version of each product.
	if rows, err := c.clickhouseEvents(ctx); err != nil {
		r.problem("clickhouse: %v", err)
	} else {
		for k, n := range rows {
			r.chRawRows += n
			r.chDupRows += n - 1
			if _, ok := acc[k]; !ok {
				r.problem("clickhouse: product_events holds %v, which ingest never acknowledged", k)
			}
		}
		for k := range acc {
			if _, ok := rows[k]; !ok && !dead["clickhouse"][k] {
				r.loses("clickhouse", k)
				r.problem("clickhouse: accepted event %v missing from product_events and not dead-lettered", k)
			}
		}
	}
	if cl, err := c.clickhouseLatest(ctx); err != nil {
		r.problem("clickhouse: %v", err)
	} else {
		c.checkLatest(r, "clickhouse", acc, versions, dead["clickhouse"], cl)
	}
	// The partner: the newest version of each product (the B2B sink posts
	// the newest version per product of a batch).
	bl := map[product]latest{}
	for p := range versions {
		if s, ok := c.receiver.Get(p.tenant, p.id); ok {
			bl[p] = latest{version: s.Version, deleted: s.Op == "delete", payload: -1}
		}
	}
	c.checkLatest(r, "b2b:"+partner, acc, versions, dead["b2b:"+partner], bl)
	if final {
		c.checkDeliveries(ctx, r, acc, dead["b2b:"+partner])
	}

	// Nothing left in flight: cursors past every event, no live lease, no
	// orphaned batch, no work item waiting.
	c.checkQuiet(ctx, r, maxSeq)
	for _, d := range dests {
		r.checked[d] = len(acc) - r.deadLettered[d] - len(r.lost[d])
	}
	return r
}

// checkLatest checks a destination's current state of every product: its
// version is an accepted one, and every accepted newer version was
// dead-lettered for this destination (normally: it is the newest).
func (c *cluster) checkLatest(r *report, dest string, acc map[key]accepted, versions map[product][]int64, dead map[key]bool, have map[product]latest) {
	for p := range have {
		if _, ok := versions[p]; !ok {
			r.problem("%s: holds product %s/%s, which ingest never acknowledged", dest, p.tenant, p.id)
		}
	}
	for p, vs := range versions {
		got, ok := have[p]
		want := int64(0) // the newest version that must have landed
		for _, v := range slices.Backward(vs) {
			if !dead[key{p.tenant, p.id, v}] {
				want = v
				break
			}
		}
		switch {
		case !ok && want == 0:
			continue
		case !ok:
			r.losesAbove(dest, p, vs, 0, dead)
			r.problem("%s: product %s/%s missing, want version %d", dest, p.tenant, p.id, want)
			continue
		case got.version < want:
			r.losesAbove(dest, p, vs, got.version, dead)
			r.problem("%s: product %s/%s at version %d, want %d", dest, p.tenant, p.id, got.version, want)
			continue
		case got.version > want && !dead[key{p.tenant, p.id, got.version}]:
			r.problem("%s: product %s/%s at version %d, newest accepted is %d", dest, p.tenant, p.id, got.version, want)
			continue
		}
		a, ok := acc[key{p.tenant, p.id, got.version}]
		switch {
		case !ok:
			r.problem("%s: product %s/%s at version %d, which ingest never acknowledged", dest, p.tenant, p.id, got.version)
		case got.deleted != (a.op == "delete"):
			r.problem("%s: product %s/%s version %d deleted=%v, but that version is %s", dest, p.tenant, p.id, got.version, got.deleted, a.op)
		case got.payload >= 0 && a.op == "upsert" && got.payload != got.version:
			r.problem("%s: product %s/%s version %d carries the payload of version %d", dest, p.tenant, p.id, got.version, got.payload)
		}
	}
}

// checkDeliveries reads every request the partner answered 2xx: each event
// in them was accepted; it counts duplicates and coalesced versions.
func (c *cluster) checkDeliveries(ctx context.Context, r *report, acc map[key]accepted, dead map[key]bool) {
	delivered := map[key]int{}
	for _, req := range c.receiver.Requests() {
		if req.Status/100 != 2 {
			continue
		}
		var b b2b.Body
		if err := json.Unmarshal(req.Body, &b); err != nil {
			r.problem("b2b: a request answered %d does not decode: %v", req.Status, err)
			continue
		}
		for _, e := range b.Events {
			k := key{b.Tenant, e.ProductID, e.Version}
			delivered[k]++
			if a, ok := acc[k]; !ok {
				r.problem("b2b: the partner received %v, which ingest never acknowledged", k)
			} else if a.seq != e.Seq || string(e.Op) != a.op {
				r.problem("b2b: the partner received %v as seq %d op %s, ingest stored seq %d op %s", k, e.Seq, e.Op, a.seq, a.op)
			}
		}
	}
	for k, n := range delivered {
		if _, ok := acc[k]; ok {
			r.b2bDelivered++
		}
		r.b2bDuplicates += n - 1
	}
	for _, n := range c.receiver.IdempotencyKeys() {
		if n > 1 {
			r.b2bDupKeys++
		}
	}
	c.checkCoalesced(ctx, r, acc, delivered, dead)
}

// checkCoalesced accounts for the accepted events the partner never
// received. The B2B sink posts only the newest version of each product in a
// work item, so such an event is fine when a batch dispatched to the
// partner covers its sequence and also covers a newer version of its
// product that the partner did receive. Anything else is lost.
func (c *cluster) checkCoalesced(ctx context.Context, r *report, acc map[key]accepted, delivered map[key]int, dead map[key]bool) {
	type span struct{ from, to uint64 }
	batches := map[string][]span{} // tenant → dispatched ranges
	rows, err := c.pool.Query(ctx, `SELECT tenant, from_seq, to_seq FROM fairway.batches WHERE dest = $1`, "b2b:"+partner)
	if err != nil {
		r.problem("b2b: batch log: %v", err)
		return
	}
	for rows.Next() {
		var t string
		var s span
		if err := rows.Scan(&t, &s.from, &s.to); err != nil {
			rows.Close()
			r.problem("b2b: batch log: %v", err)
			return
		}
		batches[t] = append(batches[t], s)
	}
	rows.Close()
	type event struct {
		version int64
		seq     uint64
	}
	got := map[product][]event{} // delivered events per product
	for k := range delivered {
		if a, ok := acc[k]; ok {
			p := product{k.tenant, k.product}
			got[p] = append(got[p], event{k.version, a.seq})
		}
	}
	for k, a := range acc {
		if delivered[k] > 0 || dead[k] {
			continue
		}
		ok := false
		for _, b := range batches[k.tenant] {
			if a.seq < b.from || a.seq > b.to {
				continue
			}
			for _, g := range got[product{k.tenant, k.product}] {
				if g.version > k.version && g.seq >= b.from && g.seq <= b.to {
					ok = true
				}
			}
		}
		if ok {
			r.b2bCoalesced++
		} else {
			r.loses("b2b:"+partner, k)
			r.problem("b2b: accepted event %v (seq %d) never reached the partner, and no batch covering it delivered a newer version", k, a.seq)
		}
	}
}

// checkQuiet checks that nothing is left to do: every cursor past its
// tenant's last event of its priority, every replay through, no live lease, no orphaned
// batch, no pending work.
func (c *cluster) checkQuiet(ctx context.Context, r *report, maxSeq map[[2]string]uint64) {
	var replaying int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM fairway.cursors WHERE replay_next < replay_until`).Scan(&replaying); err != nil {
		r.problem("cursors: %v", err)
	} else if replaying > 0 {
		r.problem("%d replays not through", replaying)
	}
	// The cursor of each priority, by tenant, destination and priority.
	cursors := map[[3]string]uint64{}
	rows, err := c.pool.Query(ctx, `SELECT tenant, dest, next_seq, high_next, bulk_next FROM fairway.cursors`)
	if err != nil {
		r.problem("cursors: %v", err)
		return
	}
	for rows.Next() {
		var t, d string
		var next, high, bulk uint64
		if err := rows.Scan(&t, &d, &next, &high, &bulk); err != nil {
			r.problem("cursors: %v", err)
			rows.Close()
			return
		}
		cursors[[3]string{t, d, ""}], cursors[[3]string{t, d, "high"}], cursors[[3]string{t, d, "bulk"}] = next, high, bulk
	}
	rows.Close()
	for tp, last := range maxSeq {
		for _, d := range dests {
			if next := cursors[[3]string{tp[0], d, tp[1]}]; next <= last {
				r.problem("%s/%s: cursor of its %s events at %d, the last of them is %d", tp[0], d, cmp.Or(tp[1], "normal"), next, last)
			}
		}
	}
	var live, orphans int
	err = c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM fairway.slots WHERE expires_at >= now()),
		(SELECT count(*) FROM fairway.orphans),
		(SELECT count(*) FROM fairway.batches),
		(SELECT count(*) FROM (SELECT 1 FROM fairway.batches GROUP BY tenant, dest, from_seq, to_seq HAVING count(*) > 1) x)`).
		Scan(&live, &orphans, &r.batches, &r.redispatched)
	switch {
	case err != nil:
		r.problem("slots: %v", err)
	case live > 0:
		r.problem("%d slot leases still live", live)
	case orphans > 0:
		r.problem("%d orphaned batches not yet re-dispatched", orphans)
	}
	for _, d := range dests {
		name := "sink-" + sanitize(d)
		cons, err := c.js.Consumer(ctx, work.StreamName, name)
		if err != nil {
			r.problem("consumer %s: %v", name, err)
			continue
		}
		info, err := cons.Info(ctx)
		if err != nil {
			r.problem("consumer %s: %v", name, err)
			continue
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			r.problem("consumer %s: %d work items pending, %d unacknowledged", name, info.NumPending, info.NumAckPending)
		}
	}
}

// deadLetters returns, per destination, the accepted events in the DLQ
// stream (event letters, and every event of a range letter's range).
func (c *cluster) deadLetters(ctx context.Context, l *ledger, r *report) map[string]map[key]bool {
	out := map[string]map[key]bool{}
	q, err := dlq.Open(ctx, c.js, "")
	if err != nil {
		r.problem("dead letters: %v", err)
		return out
	}
	letters, err := q.List(ctx, dlq.Filter{})
	if err != nil {
		r.problem("dead letters: %v", err)
		return out
	}
	r.deadLetters = len(letters)
	add := func(dest string, k key) {
		if out[dest] == nil {
			out[dest] = map[key]bool{}
		}
		out[dest][k] = true
	}
	for _, lt := range letters {
		switch lt.Kind {
		case dlq.KindEvent:
			k, ok := l.keyOfSeq(lt.SourceSeq)
			if !ok {
				r.problem("dead letter %d (%s) holds PRODUCTS seq %d, which ingest never acknowledged", lt.ID, lt.Dest, lt.SourceSeq)
				continue
			}
			add(lt.Dest, k)
		case dlq.KindRange:
			var it work.Item
			if err := json.Unmarshal(lt.Data, &it); err != nil {
				r.problem("range dead letter %d: %v", lt.ID, err)
				continue
			}
			for seq := it.FromSeq; seq <= it.ToSeq; seq++ {
				if k, ok := l.keyOfSeq(seq); ok && k.tenant == it.Tenant {
					add(lt.Dest, k)
				}
			}
		}
	}
	return out
}

func (c *cluster) postgresLatest(ctx context.Context) (map[product]latest, error) {
	rows, err := c.pool.Query(ctx, `SELECT tenant_id, product_id, version, deleted, coalesce((payload->>'v')::bigint, 0)
		FROM catalog.products`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[product]latest{}
	for rows.Next() {
		var p product
		var l latest
		if err := rows.Scan(&p.tenant, &p.id, &l.version, &l.deleted, &l.payload); err != nil {
			return nil, err
		}
		out[p] = l
	}
	return out, rows.Err()
}

func (c *cluster) clickhouseEvents(ctx context.Context) (map[key]int, error) {
	rows, err := c.chConn.Query(ctx, `SELECT tenant_id, product_id, version, count() AS n
		FROM product_events GROUP BY tenant_id, product_id, version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[key]int{}
	for rows.Next() {
		var k key
		var n uint64
		if err := rows.Scan(&k.tenant, &k.product, &k.version, &n); err != nil {
			return nil, err
		}
		out[k] = int(n)
	}
	return out, rows.Err()
}

func (c *cluster) clickhouseLatest(ctx context.Context) (map[product]latest, error) {
	rows, err := c.chConn.Query(ctx, `SELECT tenant_id, product_id, max(version), argMax(deleted, version)
		FROM products_latest GROUP BY tenant_id, product_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[product]latest{}
	for rows.Next() {
		var p product
		var v int64
		var del uint8
		if err := rows.Scan(&p.tenant, &p.id, &v, &del); err != nil {
			return nil, err
		}
		out[p] = latest{version: v, deleted: del == 1, payload: -1}
	}
	return out, rows.Err()
}
