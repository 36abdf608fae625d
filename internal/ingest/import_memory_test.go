package ingest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/pkg/events"
)

// A CSV upload is never held in memory whole: the body goes to a spool
// file and the import reads it back row by row, publishing a chunk at a
// time. So the heap an import needs does not grow with the file. A 100 MB
// upload (20,000 rows of 5 KB; a 500,000-row catalog of 200-byte rows is
// the same size, and its rows are cheaper to hold) is generated while it is
// sent, and the live heap of this process, which also runs the ingest
// server and the JetStream server, is sampled throughout: it must stay far
// below the file's size. It grew by 6–18 MB in runs under -race; reading
// the spooled file whole before parsing it made it 236 MB.
//
// Not parallel: the other tests of the package start only after it.
func TestLargeImportIsStreamed(t *testing.T) {
	const (
		rows      = 20_000
		cell      = 5_000
		maxGrowth = 48 << 20
	)
	f := setup(t, ingest.Config{})
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	var (
		peak   uint64
		mu     sync.Mutex
		stop   = make(chan struct{})
		probed sync.WaitGroup
	)
	probed.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			runtime.GC() // live heap: what the import holds, not its garbage
			runtime.ReadMemStats(&m)
			mu.Lock()
			peak = max(peak, m.HeapAlloc)
			mu.Unlock()
		}
	})
	defer func() { close(stop); probed.Wait() }()

	body, w := io.Pipe()
	go func() {
		filler := strings.Repeat("x", cell)
		_, err := io.WriteString(w, "product_id,version,op,description\n")
		for i := 0; i < rows && err == nil; i++ {
			_, err = fmt.Fprintf(w, "p%d,1,upsert,%s%d\n", i, filler, i)
		}
		w.CloseWithError(err)
	}()
	resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	id := importID(t, b)
	j := f.waitImportFor(t, id, f.tokens["acme"], 5*time.Minute)
	if j.Status != ingest.ImportSucceeded || j.RowsOK != rows || j.RowsTotal != rows {
		t.Fatalf("job %+v", j)
	}
	if n := f.msgs(t); n != rows {
		t.Fatalf("stream holds %d events, want %d", n, rows)
	}
	mu.Lock()
	growth := int64(peak) - int64(base.HeapAlloc)
	mu.Unlock()
	t.Logf("a %d MB upload of %d rows: heap peaked %.1f MB above its start", rows*cell>>20, rows, float64(growth)/(1<<20))
	if growth > maxGrowth {
		t.Fatalf("heap grew by %.1f MB during a %d MB import, want under %d MB: the upload is held in memory",
			float64(growth)/(1<<20), rows*cell>>20, maxGrowth>>20)
	}
}

// A CSV record longer than MaxCSVRecordBytes is never held in memory: a
// quoted cell of 64 MiB over 65,536 lines, far over the 1 MiB default, is
// read to its end without being kept, fails its row with an error that
// names its lines and the limit, and the rows around it are imported. The
// bytes this process allocates from the upload's start to the import's end
// (runtime.MemStats.TotalAlloc, a running sum that no sampling can miss)
// must stay under half the cell, so no buffer can have held it.
//
// Not parallel: the allocations counted must be this test's.
func TestOverLongCSVRecordIsARowErrorAndNotBuffered(t *testing.T) {
	const (
		cellLines = 64 << 10
		lineBytes = 1 << 10 // with its newline
		maxAlloc  = 32 << 20
	)
	f := setup(t, ingest.Config{})
	body, w := io.Pipe()
	go func() {
		line := []byte(strings.Repeat("x", lineBytes-1) + "\n")
		_, err := io.WriteString(w, "product_id,version,description\np1,1,before\np2,1,\"\n")
		for i := 0; i < cellLines && err == nil; i++ {
			_, err = w.Write(line)
		}
		if err == nil {
			_, err = io.WriteString(w, "\"\np3,1,after\n")
		}
		w.CloseWithError(err)
	}()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	j := f.waitImportFor(t, importID(t, b), f.tokens["acme"], 2*time.Minute)
	runtime.ReadMemStats(&after)

	want := fmt.Sprintf("line 3: record too long: the record on lines 3-%d has more than %d bytes, the limit per CSV record",
		cellLines+4, ingest.MaxCSVRecordBytesDefault)
	if j.Status != ingest.ImportSucceededWithErrors || j.RowsOK != 2 || j.RowsFailed != 1 || len(j.Errors) != 1 ||
		j.Errors[0].Line != 3 || j.Errors[0].Error != want {
		t.Fatalf("job %+v, want rows 2 and 4 stored and row 3 failing with %q", j, want)
	}
	if n := f.msgs(t); n != 2 {
		t.Fatalf("stream holds %d events, want 2", n)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB cell: %.1f MiB allocated during its upload and import", cellLines*lineBytes>>20, float64(alloc)/(1<<20))
	if alloc > maxAlloc {
		t.Fatalf("%.1f MiB allocated during the import of a %d MiB cell, want under %d MiB: the record was buffered",
			float64(alloc)/(1<<20), cellLines*lineBytes>>20, maxAlloc>>20)
	}
}

// roundRecorder publishes through the real publisher and keeps the largest
// payload total that one Publish call carried.
type roundRecorder struct {
	ingest.Publisher
	mu  sync.Mutex
	max int
}

func (p *roundRecorder) Publish(ctx context.Context, evs []events.Event) []events.Result {
	n := 0
	for _, e := range evs {
		n += len(e.Payload)
	}
	p.mu.Lock()
	p.max = max(p.max, n)
	p.mu.Unlock()
	return p.Publisher.Publish(ctx, evs)
}

// An import publishes a round once it holds ImportChunk rows or before its
// payloads would pass ImportChunkBytes, so rows of large (valid) payloads
// cannot make one round hold ImportChunk of them: 100 rows of 200 KiB go
// out in rounds of at most 8 MiB, and every row is stored.
func TestImportRoundsAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	const rows, cell = 100, 200 << 10
	rec := &roundRecorder{}
	f := setupDeps(t, ingest.Config{}, func(d *ingest.Deps) { rec.Publisher = d.Publisher; d.Publisher = rec })
	var csv strings.Builder
	csv.WriteString("product_id,version,description\n")
	filler := strings.Repeat("x", cell)
	for i := range rows {
		fmt.Fprintf(&csv, "p%d,1,%s\n", i, filler)
	}
	resp, b := f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv", strings.NewReader(csv.String()))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	j := f.waitImport(t, importID(t, b), f.tokens["acme"])
	if j.Status != ingest.ImportSucceeded || j.RowsOK != rows {
		t.Fatalf("job %+v, want %d rows stored", j, rows)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.max > ingest.ImportChunkBytesDefault {
		t.Fatalf("one round published %d bytes of payload, want at most %d", rec.max, ingest.ImportChunkBytesDefault)
	}
}
