package ingest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/pkg/events"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/ingest"
)

// An event's priority is its subject's: high and bulk events are stored on
// their own subjects, normal ones as before; a CSV import is bulk unless
// its rows say otherwise; an unknown priority is refused, and the rest of
// the request still goes in.
func TestPriorityPicksTheSubject(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	high := `{"product_id":"h","version":1,"op":"upsert","payload":{},"priority":"high"}`
	bad := `{"product_id":"x","version":1,"op":"upsert","payload":{},"priority":"urgent"}`
	resp, b := f.post(t, "/v1/tenants/acme/events", f.tokens["acme"], "application/x-ndjson", ndjson(ev("n", 1), high, bad))
	if resp.StatusCode != http.StatusMultiStatus && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %d %s", resp.StatusCode, b)
	}
	if !strings.Contains(string(b), `priority`) {
		t.Errorf("the unknown priority's error does not name the field: %s", b)
	}
	resp, b = f.post(t, "/v1/tenants/acme/imports", f.tokens["acme"], "text/csv",
		strings.NewReader("product_id,version,priority\nc1,1,\nc2,1,high\n"))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	f.waitImport(t, importID(t, b), f.tokens["acme"])
	info, err := f.stream.Info(context.Background(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"products.acme.upsert": 1, "products.acme.upsert.high": 2, "products.acme.upsert.bulk": 1}
	for subj, n := range want {
		if got := info.State.Subjects[events.LayoutDefault.StoredSubject(subj)]; got != n {
			t.Errorf("%s holds %d events, want %d (all: %v)", subj, got, n, info.State.Subjects)
		}
	}
	if info.State.Msgs != 4 {
		t.Errorf("the stream holds %d events, want 4", info.State.Msgs)
	}
}
