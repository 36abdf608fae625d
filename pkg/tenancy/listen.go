package tenancy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Released says a slot of (Tenant, Dest) was freed (or capacity grew: a
// raised limit, a resumed tenant, a swept lease), or that an operator
// changed something about the pair (Cursor, Weight, Partner). An empty
// Released{} means notifications may have been missed (the listener
// reconnected): rescan every tenant.
type Released struct {
	Tenant, Dest string
	// Cursor says the pair's cursor was moved by an operator (a replay's
	// rewind, a cancelled replay, a cursor reset): reload it rather than
	// wait for a slot.
	Cursor bool
	// Weight says an operator changed the pair's weight (SetDestWeight) or
	// its tenant's (SetWeight, one notification per destination of the
	// tenant), or its dispatch rate (SetDestRate): reload it rather than
	// wait for the next poll.
	Weight bool
	// Partner is the change an operator made to the partner that Dest
	// ("b2b:<partner>") names for Tenant: PartnerAdded, PartnerChanged or
	// PartnerRemoved (NotifyPartner). Only on PartnersChannel.
	Partner string
	// Slots is how many of the pair's slots were freed (at least 1; 0
	// with Cursor, Weight, Partner or Members): a statement that releases
	// several of one pair's slots notifies once ("<tenant> <dest> <n>"), as
	// PostgreSQL folds a transaction's identical notifications into one
	// anyway. Replay says they were its replay's slots
	// ("<tenant> <dest> replay [<n>]").
	Slots  int
	Replay bool
	// Members says a dispatcher joined (Store.Heartbeat's first beat) or
	// left (Store.Leave): Tenant and Dest are empty; the others beat now
	// rather than at their next heartbeat.
	Members bool
}

// notifyMembers is the payload of a Released with Members set.
const notifyMembers = "members"

// notifyCursor ends the payload of a Released with Cursor set:
// "<tenant> <dest> cursor"; notifyWeight one with Weight set.
const (
	notifyCursor = "cursor"
	notifyWeight = "weight"
	notifyReplay = "replay"
)

// Partner changes (Released.Partner).
const (
	PartnerAdded   = "added"
	PartnerChanged = "changed"
	PartnerRemoved = "removed"
)

// Execer runs a statement: a pgx.Tx, pgx.Conn or pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// NotifyPartner tells dispatchers and B2B sinks (Listen, ListenPartners)
// that an operator added, changed or removed partner of tenant (change is
// PartnerAdded, PartnerChanged or PartnerRemoved), so they act on it at
// once rather than at their next poll. Run it on the transaction that makes
// the change: PostgreSQL delivers the notification when it commits, and
// drops it when it rolls back.
func NotifyPartner(ctx context.Context, tx Execer, tenant, partner, change string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify('`+PartnersChannel+`', $1::text || ' ' || $2::text || ' ' || $3::text)`, tenant, partner, change)
	if err != nil {
		return fmt.Errorf("notify partner %s/%s %s: %w", tenant, partner, change, err)
	}
	return nil
}

// parseNotification turns a notification on channel into a Released.
func parseNotification(channel, payload string) Released {
	if payload == notifyMembers && channel == NotifyChannel {
		return Released{Members: true}
	}
	tenant, rest, _ := strings.Cut(payload, " ")
	name, kind, _ := strings.Cut(rest, " ")
	if channel == PartnersChannel {
		return Released{Tenant: tenant, Dest: DestB2BPrefix + name, Partner: kind}
	}
	r := Released{Tenant: tenant, Dest: name, Cursor: kind == notifyCursor, Weight: kind == notifyWeight}
	if !r.Cursor && !r.Weight {
		if rest, ok := strings.CutPrefix(kind, notifyReplay); ok {
			r.Replay, kind = true, strings.TrimPrefix(rest, " ")
		}
		r.Slots = 1
		if n, err := strconv.Atoi(kind); err == nil && n > 1 {
			r.Slots = n
		}
	}
	return r
}

// Listener reconnect backoff bounds.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// ListenerAppName is the application_name of the listening connection.
const ListenerAppName = "fairway-tenancy-listen"

// Listen subscribes to slot releases, operators' changes to cursors and
// weights (NotifyChannel) and to partners (PartnersChannel) on a dedicated
// connection (not one of the pool's): what a dispatcher follows. It
// returns once LISTEN is in place; after that it reconnects by itself on
// connection loss, sending Released{} after each reconnect. The channel
// closes when ctx ends. A slow reader delays delivery but loses nothing;
// PostgreSQL queues notifications meanwhile.
func (s *Store) Listen(ctx context.Context) (<-chan Released, error) {
	return s.listen(ctx, NotifyChannel, PartnersChannel)
}

// ListenPartners is Listen for partner changes alone (Released.Partner):
// what a B2B sink follows, without the traffic of slot releases.
func (s *Store) ListenPartners(ctx context.Context) (<-chan Released, error) {
	return s.listen(ctx, PartnersChannel)
}

func (s *Store) listen(ctx context.Context, channels ...string) (<-chan Released, error) {
	conn, err := s.listenConn(ctx, channels)
	if err != nil {
		return nil, err
	}
	ch := make(chan Released, 256)
	go s.listenLoop(ctx, conn, channels, ch)
	return ch, nil
}

func (s *Store) listenConn(ctx context.Context, channels []string) (*pgx.Conn, error) {
	cc := s.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = ListenerAppName
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("listen: connect: %w", err)
	}
	for _, c := range channels {
		if _, err := conn.Exec(ctx, "LISTEN "+c); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("listen: %w", err)
		}
	}
	return conn, nil
}

func (s *Store) listenLoop(ctx context.Context, conn *pgx.Conn, channels []string, ch chan<- Released) {
	defer close(ch)
	defer func() {
		if conn != nil {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
		}
	}()
	send := func(r Released) bool {
		select {
		case ch <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	backoff := listenBackoffMin
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			backoff = listenBackoffMin
			if !send(parseNotification(n.Channel, n.Payload)) {
				return
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("tenancy: listener connection lost; reconnecting", "err", err)
		_ = conn.Close(context.WithoutCancel(ctx))
		conn = nil
		for conn == nil {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, listenBackoffMax)
			if conn, err = s.listenConn(ctx, channels); err != nil {
				s.log.Warn("tenancy: listener reconnect failed", "err", err, "retry_in", backoff)
			}
		}
		s.log.Info("tenancy: listener reconnected")
		if !send(Released{}) {
			return
		}
	}
}
