package status_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Each partition is read by the dispatcher seen last among those that
// record it (a dead one's record lingers), and its backlog is its
// tenants'; in a stream without partitions every dispatcher reads the one.
func TestPartitionsSayWhoReadsThemAndWhatWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, nc, _ := setupServers(t, events.StreamConfig{Partitions: 4})
	var js jetstream.JetStream
	for _, h := range []string{"disp-old", "disp-a", "disp-b"} {
		if _, err := st.Heartbeat(ctx, h, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // seen in this order
	}
	for h, parts := range map[string][]int{"disp-old": {0, 1}, "disp-a": {0, 2}, "disp-b": {3}} {
		if err := st.SetPartitions(ctx, h, parts); err != nil {
			t.Fatal(err)
		}
	}
	layout := events.Layout{Partitions: 4}
	var rows []status.Row
	want := make([]uint64, 4)
	for i, tenant := range []string{"acme", "globex", "initech", "umbrella", "hooli"} {
		b := uint64(10 * (i + 1))
		rows = append(rows, status.Row{Tenant: tenant, Dest: "postgres", Backlog: b}, status.Row{Tenant: tenant, Dest: "clickhouse"})
		want[layout.PartitionOf(tenant)] += b
	}
	src := &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), Dispatchers: st}
	l, parts, err := src.Partitions(ctx, rows)
	if err != nil || l != layout || len(parts) != 4 {
		t.Fatalf("Partitions: %v, %+v, %v", l, parts, err)
	}
	readers := []string{"disp-a", "disp-old", "disp-a", "disp-b"}
	for i, p := range parts {
		if p.Partition != i || p.Dispatcher != readers[i] || p.Backlog != want[i] {
			t.Errorf("partition %d: %+v, want read by %s with backlog %d", i, p, readers[i], want[i])
		}
	}

	st, nc, js = setupServers(t, events.StreamConfig{})
	if err := js.DeleteStream(ctx, events.StreamName); err != nil {
		t.Fatal(err)
	}
	cfg := events.StreamConfig{}.JetStreamConfig()
	cfg.SubjectTransform = nil
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"disp-a", "disp-b"} {
		if _, err := st.Heartbeat(ctx, h, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	src = &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), Dispatchers: st}
	l, parts, err = src.Partitions(ctx, rows)
	if err != nil || l != (events.Layout{}) || len(parts) != 1 || parts[0].Dispatcher != "disp-a,disp-b" || parts[0].Backlog != 150 || parts[0].Tenants != 5 {
		t.Errorf("without partitions: %v, %+v, %v; want one read by disp-a and disp-b with backlog 150 of 5 tenants", l, parts, err)
	}
}
