package tenancy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Released says a slot of (Tenant, Dest) was freed (or capacity grew: a
// raised limit, a resumed tenant, a swept lease). An empty Released{} means
// notifications may have been missed (the listener reconnected): rescan
// every tenant.
type Released struct {
	Tenant, Dest string
	// Cursor says the pair's cursor was moved by an operator (a replay's
	// rewind, a cancelled replay): reload it rather than wait for a slot.
	Cursor bool
	// Slots is how many of the pair's slots were freed (at least 1; 0
	// with Cursor or Members): a statement that releases several of one
	// pair's slots notifies once ("<tenant> <dest> <n>"), as PostgreSQL
	// folds a transaction's identical notifications into one anyway.
	Slots int
	// Members says a dispatcher joined (Store.Heartbeat's first beat) or
	// left (Store.Leave): Tenant and Dest are empty; the others beat now
	// rather than at their next heartbeat.
	Members bool
}

// notifyMembers is the payload of a Released with Members set.
const notifyMembers = "members"

// notifyCursor ends the payload of a Released with Cursor set:
// "<tenant> <dest> cursor".
const notifyCursor = "cursor"

// Listener reconnect backoff bounds.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// ListenerAppName is the application_name of the listening connection.
const ListenerAppName = "fairway-tenancy-listen"

// Listen subscribes to slot releases on a dedicated connection (not one of
// the pool's). It returns once LISTEN is in place; after that it reconnects
// by itself on connection loss, sending Released{} after each reconnect.
// The channel closes when ctx ends. A slow reader delays delivery but
// loses nothing; PostgreSQL queues notifications meanwhile.
func (s *Store) Listen(ctx context.Context) (<-chan Released, error) {
	conn, err := s.listenConn(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan Released, 256)
	go s.listenLoop(ctx, conn, ch)
	return ch, nil
}

func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cc := s.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = ListenerAppName
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("listen: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

func (s *Store) listenLoop(ctx context.Context, conn *pgx.Conn, ch chan<- Released) {
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
			r := Released{Members: true}
			if n.Payload != notifyMembers {
				tenant, rest, _ := strings.Cut(n.Payload, " ")
				dest, kind, _ := strings.Cut(rest, " ")
				r = Released{Tenant: tenant, Dest: dest, Cursor: kind == notifyCursor}
				if !r.Cursor {
					r.Slots = 1
					if n, err := strconv.Atoi(kind); err == nil && n > 1 {
						r.Slots = n
					}
				}
			}
			if !send(r) {
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
			if conn, err = s.listenConn(ctx); err != nil {
				s.log.Warn("tenancy: listener reconnect failed", "err", err, "retry_in", backoff)
			}
		}
		s.log.Info("tenancy: listener reconnected")
		if !send(Released{}) {
			return
		}
	}
}
