package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// stallingPublisher publishes normally until its stallAt-th call, which
// blocks until the caller's context ends (the import runner's shutdown).
type stallingPublisher struct {
	ingest.Publisher
	calls   atomic.Int32
	stallAt int32
	stalled chan struct{}
}

func (p *stallingPublisher) Publish(ctx context.Context, evs []events.Event) []events.Result {
	if p.calls.Add(1) == p.stallAt {
		close(p.stalled)
		<-ctx.Done()
		res := make([]events.Result, len(evs))
		for i := range res {
			res[i].Err = ctx.Err()
		}
		return res
	}
	return p.Publisher.Publish(ctx, evs)
}

// An import interrupted by shutdown resumes on the next start of the same
// node after its last recorded chunk, and every row ends up stored once.
func TestImportResumesAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	store, _ := tenancy.New(pool, nil)
	_, tok, err := store.CreateTenant(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, js := testenv.JetStream(t)
	stream, err := events.EnsureStream(ctx, js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := events.NewPublisher(js, events.WithValidatedEvents())
	spool := t.TempDir()
	cfg := ingest.Config{SpoolDir: spool, Node: "n1", ImportChunk: 10, ImportWorkers: 1, Logger: quietLogger()}

	stall := &stallingPublisher{Publisher: pub, stallAt: 4, stalled: make(chan struct{})}
	first, err := ingest.New(ingest.Deps{Publisher: stall, Tenants: store, Pool: pool}, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(first.Handler())
	defer hs.Close()
	var csv strings.Builder
	csv.WriteString("product_id,version,name\n")
	const rows = 95
	for i := range rows {
		fmt.Fprintf(&csv, "p%d,1,n%d\n", i, i)
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/tenants/acme/imports", strings.NewReader(csv.String()))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var acc ingest.ImportAccepted
	_ = json.NewDecoder(resp.Body).Decode(&acc)
	resp.Body.Close()
	<-stall.stalled
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := first.Import(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != ingest.ImportRunning || j.RowsTotal != 30 {
		t.Fatalf("after shutdown: %+v, want running with 30 rows done", j)
	}

	second, err := ingest.New(ingest.Deps{Publisher: pub, Tenants: store, Pool: pool}, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer second.Close(ctx) //nolint:errcheck
	hs2 := httptest.NewServer(second.Handler())
	defer hs2.Close()
	f := &fixture{url: hs2.URL}
	j = f.waitImport(t, acc.ID, tok)
	if j.Status != ingest.ImportSucceeded || j.RowsTotal != rows || j.RowsOK != rows {
		t.Fatalf("after resume: %+v", j)
	}
	info, _ := stream.Info(ctx)
	if info.State.Msgs != rows {
		t.Fatalf("stream holds %d events, want %d", info.State.Msgs, rows)
	}
}
