package bootstrap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// UntilRefused runs step with a context that ends like ctx, and also as
// soon as the server refuses a publish or subscription of nc (a
// permissions violation): the server answers a refused request with
// nothing, so a step sending one would otherwise wait for its deadline.
// The refusal, carrying the server's reason, is then step's error (and
// goes to nc's error handler only if step succeeds regardless). nc's
// error handler is wrapped while step runs; run one step at a time on a
// connection.
func UntilRefused(ctx context.Context, nc *nats.Conn, step func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			cancel(err)
			return
		}
		if prev != nil {
			prev(c, s, err)
		}
	})
	defer nc.SetErrorHandler(prev)
	err := step(ctx)
	cause := context.Cause(ctx)
	if !errors.Is(cause, nats.ErrPermissionViolation) {
		return err
	}
	if err == nil {
		if prev != nil {
			prev(nc, nil, cause)
		}
		return nil
	}
	return fmt.Errorf("%w (%sthe server's configuration grants each user its subjects: deploy/nats/accounts.conf)", cause, natsUser(nc))
}

// natsUser returns `NATS user "name"; ` for the user nc connected as,
// or "" when it connected without a user name.
func natsUser(nc *nats.Conn) string {
	user := nc.Opts.User
	if u, err := url.Parse(nc.ConnectedUrl()); err == nil && u.User != nil {
		user = cmp.Or(user, u.User.Username())
	}
	if user == "" {
		return ""
	}
	return fmt.Sprintf("NATS user %q; ", user)
}

// Waiting for a stream another service owns (AwaitStream).
const (
	awaitStreamPoll = 500 * time.Millisecond
	awaitStreamLog  = 30 * time.Second
)

// AwaitStream returns the stream name once it exists. The stream belongs
// to another service, owner, which creates and updates it; a service that
// only uses it waits for it instead, so the services may start in any
// order. It logs at once that it waits, then every 30 s, and retries
// until ctx ends; a refusal by the server (the user may not look at the
// stream) ends the wait at once.
func AwaitStream(ctx context.Context, js jetstream.JetStream, name, owner string, log *slog.Logger) (jetstream.Stream, error) {
	var s jetstream.Stream
	var logged time.Time
	err := UntilRefused(ctx, js.Conn(), func(ctx context.Context) error {
		for {
			reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			s, err = js.Stream(reqCtx, name)
			cancel()
			if err == nil {
				if !logged.IsZero() {
					log.Info("stream found; starting", "stream", name)
				}
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("waiting for stream %s (%s creates it): %w", name, owner, err)
			}
			if time.Since(logged) >= awaitStreamLog {
				if errors.Is(err, jetstream.ErrStreamNotFound) {
					log.Warn("waiting for stream "+name+"; "+owner+" creates it", "stream", name)
				} else {
					log.Warn("waiting for stream "+name, "stream", name, "err", err)
				}
				logged = time.Now()
			}
			select {
			case <-ctx.Done():
			case <-time.After(awaitStreamPoll):
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// KeepStreamEvery is how often KeepStream looks for its stream.
const KeepStreamEvery = 5 * time.Second

// KeepStream creates the stream name again with ensure whenever it is
// gone, looking every KeepStreamEvery until ctx ends: the stream's owner
// runs it, so that a NATS server replaced by one with an empty store (or
// a stream deleted by hand) gets its stream back without a restart. The
// services that only use the stream wait for it, and the dispatcher holds
// its cursors for an operator to decide (docs/operating.md, "Stream
// resets").
func KeepStream(ctx context.Context, js jetstream.JetStream, name string, every time.Duration, ensure func(context.Context) error, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		reqCtx, cancel := context.WithTimeout(ctx, every)
		_, err := js.Stream(reqCtx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			if err := ensure(reqCtx); err != nil {
				log.Warn("stream "+name+" is gone; creating it again failed", "stream", name, "err", err)
			} else {
				log.Warn("stream "+name+" was gone; created it again", "stream", name)
			}
		}
		cancel()
	}
}
