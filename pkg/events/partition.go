package events

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Partitions. Publishers publish to products.<tenant>.<op>[.<priority>]
// (SubjectFor); a partitioned stream stores each event on
// products.<partition>.<tenant>.<op>[.<priority>], the partition chosen
// by JetStream itself: the stream's subject transform hashes the tenant
// token ({{partition(P,1)}}), so every event of a tenant lands in one
// partition and no client computes it. A dispatcher then reads only the
// partitions it owns (a consumer filtered on products.<partition>.>).
//
// The layout is fixed when the stream is created: an existing stream
// keeps the one it has (EnsureStream never adds, removes or changes the
// transform, as the events already stored keep their subjects). A stream
// created before partitions existed keeps working unpartitioned: it is one
// partition, the whole stream.

const (
	// PartitionsDefault is the number of partitions a new stream has.
	PartitionsDefault = 8
	// PartitionsMax bounds StreamConfig.Partitions.
	PartitionsMax = 1024
)

// LayoutDefault is the layout of a stream EnsureStream creates with the
// default configuration.
var LayoutDefault = Layout{Partitions: PartitionsDefault}

// Layout is how a stream stores event subjects: with a partition token
// after the prefix (Partitions > 0), or without (0, a stream created
// before partitions; it reads as one partition).
type Layout struct {
	Partitions int
}

// Count is the number of partitions readers split the stream into: 1 for
// an unpartitioned stream.
func (l Layout) Count() int { return max(l.Partitions, 1) }

// transform is the stream's subject transform for l (nil: none).
func (l Layout) transform() *jetstream.SubjectTransformConfig {
	if l.Partitions == 0 {
		return nil
	}
	return &jetstream.SubjectTransformConfig{
		Source:      SubjectPrefix + ".*.>",
		Destination: fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}.>", SubjectPrefix, l.Partitions),
	}
}

// LayoutOf returns the layout of a stream configured as cfg: partitioned
// when its subject transform is the one EnsureStream sets, unpartitioned
// when it has none. Any other transform is an error: its stored subjects
// are not fairway's.
func LayoutOf(cfg jetstream.StreamConfig) (Layout, error) {
	tr := cfg.SubjectTransform
	if tr == nil || tr.Destination == "" {
		return Layout{}, nil
	}
	var p int
	if _, err := fmt.Sscanf(tr.Destination, SubjectPrefix+".{{partition(%d,1)}}.{{wildcard(1)}}.>", &p); err == nil &&
		p >= 1 && p <= PartitionsMax && *tr == *(Layout{Partitions: p}).transform() {
		return Layout{Partitions: p}, nil
	}
	return Layout{}, fmt.Errorf("%w: stream %s transforms %s to %s, not fairway's partitions (%s)",
		ErrInvalidConfig, cfg.Name, tr.Source, tr.Destination, Layout{Partitions: PartitionsDefault}.transform().Destination)
}

// StreamLayout asks the server (one stream info request on nc) for the
// layout of stream name.
func StreamLayout(ctx context.Context, nc *nats.Conn, name string) (Layout, error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+name, nil)
	if err != nil {
		return Layout{}, fmt.Errorf("stream %s info: %w", name, err)
	}
	var info struct {
		Config jetstream.StreamConfig `json:"config"`
		Error  *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return Layout{}, fmt.Errorf("stream %s info: %w", name, err)
	}
	if info.Error != nil {
		return Layout{}, fmt.Errorf("stream %s info: %s (%d)", name, info.Error.Description, info.Error.Code)
	}
	return LayoutOf(info.Config)
}

// PartitionOf is the partition a tenant's events are stored in: the
// FNV-1a hash of the tenant mod Partitions, as nats-server's partition
// transform computes it (TestPartitionOfIsTheServers checks it against
// the server); 0 when unpartitioned. Readers use it to know which
// dispatcher owns a tenant; what they read they filter by the stored
// subject, which needs no hash.
func (l Layout) PartitionOf(tenant string) int {
	if l.Partitions == 0 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(l.Partitions))
}

// prefix is what comes before the tenant token in a stored subject of
// any partition.
func (l Layout) prefix() string {
	if l.Partitions == 0 {
		return SubjectPrefix + "."
	}
	return SubjectPrefix + ".*."
}

// TenantSubjects returns the filter matching every stored event of
// tenant, whatever its priority: products.*.<tenant>.> (unpartitioned:
// products.<tenant>.>). Use it for a per-tenant direct get or consumer.
func (l Layout) TenantSubjects(tenant string) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	return l.prefix() + tenant + ".>", nil
}

// PrioritySubjects returns the filter matching tenant's stored events of
// priority p: products.*.<tenant>.* for normal (or ""), else
// products.*.<tenant>.*.<priority> (unpartitioned: without the first *).
func (l Layout) PrioritySubjects(tenant string, p Priority) (string, error) {
	if err := ValidateTenant(tenant); err != nil {
		return "", err
	}
	if !p.Valid() {
		return "", &ValidationError{Field: "priority", Reason: quote(string(p)) + " is not one of high, normal, bulk"}
	}
	return l.prefix() + tenant + ".*" + p.subjectSuffix(), nil
}

// OpSubjects returns the filter matching tenant's stored events of op and
// priority p ("" is normal): the one subject they are stored on, with any
// partition.
func (l Layout) OpSubjects(tenant string, op Op, p Priority) (string, error) {
	subj, err := SubjectFor(tenant, op, p)
	if err != nil {
		return "", err
	}
	return l.prefix() + subj[len(SubjectPrefix)+1:], nil
}

// MarkedSubjects returns the filter matching every stored high or bulk
// event, of any tenant.
func (l Layout) MarkedSubjects() string { return l.prefix() + "*.*.*" }

// PartitionSubjects returns the filter matching every stored event of
// partition i: products.<i>.> (unpartitioned: the whole stream).
func (l Layout) PartitionSubjects(i int) string {
	if l.Partitions == 0 {
		return SubjectWildcard
	}
	return SubjectPrefix + "." + strconv.Itoa(i) + ".>"
}

// SubjectPartition returns the partition token of a stored subject of a
// partitioned stream, or -1 when it has none (unpartitioned, or no event
// subject). It does not validate the rest (ParseSubject does).
func SubjectPartition(subject string) int {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok {
		return -1
	}
	p, _ := CutPartition(rest)
	return p
}

// CutPartition cuts the partition token off rest, a stored subject after
// its prefix: it returns the partition and what follows it, or -1 and
// rest itself when the subject carries no partition.
func CutPartition(rest string) (p int, after string) {
	tok, after, ok := strings.Cut(rest, ".")
	if !ok || !partitioned(tok, after) {
		return -1, rest
	}
	p, _ = strconv.Atoi(tok)
	return p, after
}

// partitioned says whether a stored subject whose first token after the
// prefix is first and the rest is rest carries a partition token: first
// is a number and rest holds a tenant and an op (and maybe a priority). A
// stored subject has 3 tokens unpartitioned (products.<tenant>.<op>), 4
// (…<op>.<priority> unpartitioned, or products.<partition>.<tenant>.<op>)
// or 5 (partitioned with a priority): of 4, the one whose last token is an
// op is partitioned, as no priority is named like an op.
func partitioned(first, rest string) bool {
	if first == "" || strings.Trim(first, "0123456789") != "" {
		return false
	}
	switch strings.Count(rest, ".") {
	case 1: // <tenant>.<op> or <op>.<priority>
		_, last, _ := strings.Cut(rest, ".")
		return Op(last).Valid()
	case 2:
		return true
	}
	return false
}

// StoredSubject is the subject an event published on subject (SubjectFor)
// is stored on in a stream of layout l.
func (l Layout) StoredSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix+".")
	if !ok || l.Partitions == 0 {
		return subject
	}
	tenant, _, _ := strings.Cut(rest, ".")
	return SubjectPrefix + "." + strconv.Itoa(l.PartitionOf(tenant)) + "." + rest
}
