package dispatch

import (
	"context"
	"hash/fnv"
	"slices"
	"time"
)

// Several dispatchers. Any dispatcher could grant every pair; left alone,
// replicas visit the same tenants in the same order and race for each
// grant, and all but one lose it (tenancy.ErrCursorMoved) after a
// database round trip, nearly every race lost and dispatch slower than
// with one. So each dispatcher heartbeats its row in fairway.dispatchers
// (tenancy.Store.Heartbeat) and grants only the pairs it owns: those of
// the partitions rendezvous hashing gives it over the dispatchers seen
// alive (partitions.go), or, in a stream without partitions, the pairs
// the same hashing gives it. The others stay parked in its scheduler
// (they cost nothing and keep their backlog hint), so when a dispatcher
// leaves or goes quiet its pairs are granted by the others at their next
// heartbeat.
// Ownership is an optimisation, not a guarantee: while the dispatchers'
// views differ (for a heartbeat or so) two may grant one pair, and the
// cursor check in tenancy.DispatchMany still gives each range to exactly
// one of them.

// membership is one heartbeat's view: the dispatchers alive, sorted.
type membership struct {
	members []string
}

// owner returns the member that owns the pair (tenant, dest): the one with
// the highest hash of member and pair (rendezvous hashing, so a member that
// joins or leaves moves only its own share of the pairs).
func owner(members []string, tenant, dest string) string {
	var best string
	var bestH uint64
	for _, m := range members {
		v := rendezvous(m, tenant, dest)
		if best == "" || v > bestH || (v == bestH && m < best) {
			best, bestH = m, v
		}
	}
	return best
}

// rendezvous is member's hash for the pair (tenant, dest).
func rendezvous(member, tenant, dest string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(dest))
	// fnv's low bits mix poorly for similar inputs: finish with a
	// multiply-xorshift so shares stay even.
	v := h.Sum64()
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	return v
}

// owns reports whether this dispatcher grants the pair: it owns the
// tenant's partition (partitions.go), or, in an unpartitioned stream, the
// pair. Alone, or before the first heartbeat, it owns every pair.
func (d *Dispatcher) owns(tenant, dest string) bool {
	m := d.members.Load()
	if m == nil || len(m.members) < 2 {
		return true
	}
	if d.parts != nil && d.parts.partitioned() {
		return d.parts.ownsPart(d.parts.layout.PartitionOf(tenant))
	}
	return owner(m.members, tenant, dest) == d.cfg.Holder
}

// heartbeat records this dispatcher in fairway.dispatchers and, when the
// set of dispatchers alive changed, re-parks every pair.
func (d *Dispatcher) heartbeat(ctx context.Context) error {
	members, err := d.st.Heartbeat(ctx, d.cfg.Holder, memberTTL*d.cfg.Heartbeat)
	if err != nil {
		return err
	}
	d.m.members.Set(float64(len(members)))
	if old := d.members.Load(); old != nil && slices.Equal(old.members, members) {
		return nil
	}
	d.members.Store(&membership{members: members})
	d.log.Info("dispatchers alive", "holder", d.cfg.Holder, "members", members)
	d.moveParts(ctx) // before repark: owns asks it for this dispatcher's partitions
	for _, x := range d.allLanes() {
		x.repark()
	}
	return nil
}

// heartbeatLoop beats every Config.Heartbeat, and at once when another
// dispatcher joins or leaves (tenancy notifies it), until ctx ends; then it
// removes this dispatcher's row so the others take its pairs over at once.
func (d *Dispatcher) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.leave(ctx)
			return
		case <-t.C:
		case <-d.beatKick:
		}
		if err := d.heartbeat(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("heartbeat failed; keeping the last view of the dispatchers alive", "err", err)
			d.m.errors.WithLabelValues("", "heartbeat").Inc()
		}
	}
}

// leave removes this dispatcher's heartbeat, so that the others take its
// pairs over at once rather than once its row is old; ctx has ended.
func (d *Dispatcher) leave(ctx context.Context) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := d.st.Leave(lctx, d.cfg.Holder); err != nil {
		d.log.Warn("could not remove this dispatcher's heartbeat; the others take its tenants over once it is old", "err", err)
	}
}

// beatNow makes heartbeatLoop beat at once (Released.Members: another
// dispatcher joined or left).
func (d *Dispatcher) beatNow() {
	select {
	case d.beatKick <- struct{}{}:
	default:
	}
}

// repark parks the pairs of x another dispatcher owns and unparks x's own.
func (x *destination) repark() {
	x.mu.Lock()
	for _, ts := range x.tenants {
		parked := !x.d.owns(ts.tenant, x.name)
		x.sched.SetParked(x.key(ts.tenant), parked)
		if parked {
			x.stopFeed(ts) // the owner replays it now; a feed here would only cost the server
		}
	}
	x.mu.Unlock()
	x.kick()
}
