package events

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// publishEach publishes one event per tenant and priority (ops alternating)
// and returns the stored subjects of the stream, by stream info.
func publishEach(t *testing.T, js jetstream.JetStream, s jetstream.Stream, tenants []string) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	p := newPublisher(t, js)
	var evs []Event
	for i, tenant := range tenants {
		e := validEvent()
		e.Tenant = tenant
		for j, pr := range Priorities {
			e.ProductID = fmt.Sprintf("sku-%d-%d", i, j)
			e.Priority, e.Op = pr, []Op{OpUpsert, OpDelete}[(i+j)%2]
			if pr == PriorityNormal {
				e.Priority = ""
			}
			evs = append(evs, e)
		}
	}
	for _, r := range p.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(SubjectWildcard))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != len(evs) {
		t.Fatalf("%d stored subjects, want %d", len(info.State.Subjects), len(evs))
	}
	return info.State.Subjects
}

// Tenants whose names look like partitions or ops, and many ordinary ones,
// so that every partition is hit.
func partitionTenants() []string {
	out := []string{"3", "0", "upsert", "delete", "high", "bulk", "7-x"}
	for i := range 200 {
		out = append(out, fmt.Sprintf("tenant-%d", i))
	}
	return out
}

// The server stores each event in its tenant's partition, which is the
// one PartitionOf computes; ParseSubject reads the stored subjects back,
// and the layout's filters find each tenant's events and only them.
func TestPartitionOfIsTheServers(t *testing.T) {
	t.Parallel()
	nc, js := bare(t)
	ctx := context.Background()
	s, err := EnsureStream(ctx, js, StreamConfig{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	l, err := StreamLayout(ctx, nc, StreamName)
	if err != nil || l != (Layout{Partitions: 8}) {
		t.Fatalf("StreamLayout = %+v, %v; want 8 partitions", l, err)
	}
	tenants := partitionTenants()
	subjects := publishEach(t, js, s, tenants)
	seen := map[int]bool{}
	perTenant := map[string]int{}
	for subj := range subjects {
		tenant, op, p, err := ParseSubject(subj)
		if err != nil {
			t.Errorf("ParseSubject(%q): %v", subj, err)
			continue
		}
		part := SubjectPartition(subj)
		if want := l.PartitionOf(tenant); part != want {
			t.Errorf("%s: stored in partition %d, PartitionOf(%q) = %d", subj, part, tenant, want)
		}
		if want, _ := SubjectFor(tenant, op, p); l.StoredSubject(want) != subj {
			t.Errorf("%s parses as %s %s %s", subj, tenant, op, p)
		}
		seen[part] = true
		perTenant[tenant]++
	}
	if len(seen) != 8 {
		t.Errorf("events in %d partitions, want all 8", len(seen))
	}
	for _, tenant := range tenants {
		if perTenant[tenant] != len(Priorities) {
			t.Errorf("tenant %q: %d subjects parsed as its, want %d", tenant, perTenant[tenant], len(Priorities))
		}
	}
	// Filters: a tenant's, a priority's, a partition's.
	count := func(filter string) uint64 {
		t.Helper()
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}
	for _, tenant := range []string{"3", "upsert", "tenant-7"} {
		f, _ := l.TenantSubjects(tenant)
		if n := count(f); n != 3 {
			t.Errorf("%s matches %d events, want 3", f, n)
		}
		for _, p := range Priorities {
			f, _ := l.PrioritySubjects(tenant, p)
			if n := count(f); n != 1 {
				t.Errorf("%s matches %d events, want 1", f, n)
			}
		}
	}
	if n := count(l.MarkedSubjects()); n != uint64(2*len(tenants)) {
		t.Errorf("%s matches %d events, want %d", l.MarkedSubjects(), n, 2*len(tenants))
	}
	var total uint64
	for i := range l.Count() {
		total += count(l.PartitionSubjects(i))
	}
	if total != uint64(3*len(tenants)) {
		t.Errorf("the partitions' filters match %d events, want %d", total, 3*len(tenants))
	}
}

// A stream created before partitions (no subject transform) keeps its
// layout: EnsureStream does not add one, as the events stored keep their
// subjects, and its readers' filters are the unpartitioned ones.
func TestStreamWithoutPartitionsKeepsWorking(t *testing.T) {
	t.Parallel()
	nc, js := bare(t)
	ctx := context.Background()
	old := StreamConfig{}.JetStreamConfig()
	old.SubjectTransform = nil
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	s, err := EnsureStream(ctx, js, StreamConfig{Partitions: 16})
	if err != nil {
		t.Fatal(err)
	}
	if tr := s.CachedInfo().Config.SubjectTransform; tr != nil {
		t.Fatalf("EnsureStream added a transform to an existing stream: %+v", tr)
	}
	l, err := StreamLayout(ctx, nc, StreamName)
	if err != nil || l != (Layout{}) || l.Count() != 1 {
		t.Fatalf("StreamLayout = %+v, %v; want unpartitioned", l, err)
	}
	tenants := partitionTenants()
	for subj := range publishEach(t, js, s, tenants) {
		if SubjectPartition(subj) != -1 {
			t.Errorf("%s: a partition in an unpartitioned stream's subject", subj)
		}
		tenant, op, p, err := ParseSubject(subj)
		if want, _ := SubjectFor(tenant, op, p); err != nil || want != subj {
			t.Errorf("ParseSubject(%q) = %s %s %s, %v", subj, tenant, op, p, err)
		}
	}
	f, _ := l.TenantSubjects("3")
	if m, err := s.GetLastMsgForSubject(ctx, f); err != nil || m.Subject != "products.3.upsert.bulk" && m.Subject != "products.3.delete.bulk" {
		t.Errorf("last of %s: %v, %v", f, m, err)
	}
}

// A stream with a subject transform that is not fairway's is refused, not
// read with the wrong filters.
func TestStreamWithAForeignTransformIsRefused(t *testing.T) {
	t.Parallel()
	nc, js := bare(t)
	ctx := context.Background()
	cfg := StreamConfig{}.JetStreamConfig()
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "products.>", Destination: "other.>"}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStream(ctx, js, StreamConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("EnsureStream: %v, want ErrInvalidConfig", err)
	}
	if _, err := StreamLayout(ctx, nc, StreamName); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("StreamLayout: %v, want ErrInvalidConfig", err)
	}
	if _, err := StreamLayout(ctx, nc, "MISSING"); err == nil {
		t.Error("StreamLayout of a missing stream: no error")
	}
}

func TestSubjectPartition(t *testing.T) {
	t.Parallel()
	for subj, want := range map[string]int{
		"products.3.acme.upsert":       3,
		"products.12.acme.delete.bulk": 12,
		"products.3.upsert":            -1, // tenant 3, unpartitioned
		"products.3.upsert.high":       -1, // tenant 3, high, unpartitioned
		"products.3.3.upsert.high":     3,
		"products.3.upsert.upsert":     3, // tenant "upsert"
		"products.acme.upsert":         -1,
		"orders.3.acme.upsert":         -1,
		"products.x3.acme.upsert":      -1,
	} {
		if got := SubjectPartition(subj); got != want {
			t.Errorf("SubjectPartition(%q) = %d, want %d", subj, got, want)
		}
	}
}
