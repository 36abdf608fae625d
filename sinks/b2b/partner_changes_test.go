package b2b_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// logLines is a slog handler that sends each message to a channel.
type logLines chan string

func (l logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l logLines) Handle(_ context.Context, r slog.Record) error {
	l <- r.Message
	return nil
}
func (l logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logLines) WithGroup(string) slog.Handler      { return l }

// A partner changed or removed with the Registry (`fairway partners`)
// reaches a sink that follows the changes at once, although its cache would
// keep the old settings for an hour; the sink logs each change.
func TestSinkFollowsPartnerChanges(t *testing.T) {
	t.Parallel()
	e := setup(t)
	lines := make(logLines, 16)
	s, first := e.simple(t, b2b.Partner{}, b2b.Config{PartnerCacheTTL: time.Hour, Logger: slog.New(lines)})
	name := strings.TrimPrefix(s.Name(), tenancy.DestB2BPrefix)
	mustApply(t, s, one("a", 1))
	if first.OK() != 1 {
		t.Fatalf("first receiver got %d requests", first.OK())
	}
	st, err := tenancy.New(e.pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := st.ListenPartners(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	go s.FollowChanges(ctx(t), changes)
	waitLine := func(want string) {
		t.Helper()
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, want) {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no log line %q", want)
			}
		}
	}

	second := e.receiver(t)
	url := second.URL()
	if _, err := e.reg.Update(ctx(t), "acme", name, b2b.Update{URL: &url}); err != nil {
		t.Fatal(err)
	}
	waitLine("partner changed")
	mustApply(t, s, one("b", 1))
	if second.OK() != 1 || first.OK() != 1 {
		t.Fatalf("after the URL change: first %d, second %d requests; want the new one at the new URL", first.OK(), second.OK())
	}

	if err := e.reg.Remove(ctx(t), "acme", name); err != nil {
		t.Fatal(err)
	}
	waitLine("partner removed")
	errs, err := s.Apply(ctx(t), one("c", 1))
	if err != nil || len(errs) != 1 || !errors.Is(errs[0], b2b.ErrUnknownPartner) {
		t.Fatalf("after removal: %v %v, want the record refused for an unknown partner", errs, err)
	}
}
