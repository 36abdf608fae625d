package runner_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// The runner's log lines about an item's failures name the item and the
// ingest request ids of the events involved (a bounded list and a count),
// so a failure in a sink can be traced back to the request that sent it.
//
// Items with store times are read without headers, and items that carry
// their events' bodies are not read at all; the runner reads the headers
// of their events when a failure needs them, so the log lines and the
// dead letter are the same every way.
func TestLogsCarryItemAndRequestIDs(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"headers", "timed", "carried"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			testLogsCarryItemAndRequestIDs(t, how)
		})
	}
}

func testLogsCarryItemAndRequestIDs(t *testing.T, how string) {
	e := setup(t)
	e.timed, e.carried = how == "timed", how == "carried"
	logs := &logBuffer{}
	cfg := e.fastConfig()
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w := &wrapSink{inner: e.pg, before: func(_ context.Context, call int, _ []sink.Record) error {
		if call == 1 {
			return fmt.Errorf("postgres sink: apply: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
		}
		return nil
	}}
	// Five events from five requests, then a poison event from its own.
	for i := 1; i <= 5; i++ {
		e.publishAs(fmt.Sprintf("req-%d", i), upsert("acme", fmt.Sprintf("p%d", i), 1))
	}
	poison := upsert("acme", "poison", 1)
	poison.Payload = json.RawMessage(`{"name":"nul \u0000 inside"}`)
	e.publishAs("req-poison", poison)
	it := e.dispatch("acme", "postgres", 6)
	r, _ := e.start(w, cfg)
	e.drained(r.Config().Consumer)

	type requests struct {
		IDs   []string `json:"ids"`
		Count int      `json:"count"`
	}
	type line struct {
		Msg      string   `json:"msg"`
		Item     string   `json:"item"`
		Requests requests `json:"requests"`
	}
	lines := map[string]line{} // by message
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		lines[l.Msg] = l
	}
	for msg, want := range map[string]requests{
		"apply failed; retrying": {IDs: []string{"req-1", "req-2", "req-3"}, Count: 6}, // bounded: first three of six
		"dead-lettered":          {IDs: []string{"req-poison"}, Count: 1},
	} {
		got, ok := lines[msg]
		if !ok {
			t.Errorf("no %q line in the log:\n%s", msg, logs)
			continue
		}
		if got.Item != it.MsgID() {
			t.Errorf("%q: item %q, want %q", msg, got.Item, it.MsgID())
		}
		if !slices.Equal(got.Requests.IDs, want.IDs) || got.Requests.Count != want.Count {
			t.Errorf("%q: requests %+v, want %+v", msg, got.Requests, want)
		}
	}
	letters := e.letters(dlq.Filter{Tenant: "acme"})
	if len(letters) != 1 || letters[0].SourceSubject != events.LayoutDefault.StoredSubject("products.acme.upsert") ||
		letters[0].Header.Get(events.HeaderRequestID) != "req-poison" || letters[0].SourceSeq == 0 {
		t.Fatalf("dead letters %+v, want the poison event with its subject and request id", letters)
	}
}

// publishAs stores evs in PRODUCTS as ingest does for request id.
func (e *env) publishAs(id string, evs ...events.Event) {
	e.t.Helper()
	for i, r := range e.pub.Publish(events.ContextWithRequestID(context.Background(), id), evs) {
		if r.Err != nil {
			e.t.Fatalf("publish %d: %v", i, r.Err)
		}
	}
}
