// Package kind is the registry of sink kinds: the kinds of destination
// fairway delivers to (postgres, clickhouse, b2b:<partner>), with what the
// rest of the system needs to know about each without importing its sink.
// Destination validation (pkg/tenancy, internal/work), the dispatcher's
// batch sizes and cmd/sinks read it; package sinks (sinks/open.go) maps
// each kind to the constructor of its sink, and a sink's own error rows
// come with the sink (internal/sink.Classifier).
//
// Adding a kind adds its line to kinds below, its sink package under
// sinks/, and its constructor in sinks/open.go (docs/sinks.md, "Writing
// a sink").
package kind

import (
	"fmt"
	"strings"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Names of the kinds.
const (
	Postgres   = "postgres"
	ClickHouse = "clickhouse"
	B2B        = "b2b"
)

// ClickHouseBatchSize is the clickhouse kind's default batch size: every
// ClickHouse INSERT makes a part that the server merges again and again in
// the background, so it takes few big work items (docs/dispatcher.md,
// "Batch size per destination").
const ClickHouseBatchSize = 5_000

// Kind is one kind of destination.
type Kind struct {
	// Name is the destination's name, or for a kind with instances the
	// part before ':'.
	Name string
	// Instance is, for a kind with instances, what follows "<Name>:" in a
	// destination: "partner" for b2b:<partner>. An instance name follows
	// the tenant-id rule (events.TenantPattern), so that a destination is
	// one NATS subject token. Empty for a kind whose only destination is
	// Name.
	Instance string
	// BatchSize is the most events the dispatcher puts in one work item of
	// the kind's destinations unless it is told otherwise
	// (dispatch.Config.DestBatchSize). 0: the dispatcher's BatchSize.
	BatchSize int
}

// kinds is the registry, in the order messages list them.
var kinds = []Kind{
	{Name: Postgres},
	{Name: ClickHouse, BatchSize: ClickHouseBatchSize},
	{Name: B2B, Instance: "partner"},
}

// All returns every kind, in the order messages list them.
func All() []Kind { return append([]Kind(nil), kinds...) }

// Pattern is how a destination of k is written: "postgres",
// "b2b:<partner>".
func (k Kind) Pattern() string {
	if k.Instance == "" {
		return k.Name
	}
	return k.Name + ":<" + k.Instance + ">"
}

// Describe lists the destinations for messages: "postgres, clickhouse or
// b2b:<partner>".
func Describe() string {
	ps := make([]string, len(kinds))
	for i, k := range kinds {
		ps[i] = k.Pattern()
	}
	if len(ps) == 1 {
		return ps[0]
	}
	return strings.Join(ps[:len(ps)-1], ", ") + " or " + ps[len(ps)-1]
}

// Parse returns the kind of dest and its instance ("" for a kind without
// instances), or an error wrapping ErrInvalid that says what is wrong.
func Parse(dest string) (Kind, string, error) {
	name, instance, suffixed := strings.Cut(dest, ":")
	for _, k := range kinds {
		switch {
		case k.Name != name:
			continue
		case k.Instance == "" && !suffixed:
			return k, "", nil
		case k.Instance != "" && suffixed:
			if events.ValidateTenant(instance) != nil {
				return Kind{}, "", fmt.Errorf("%w %q: the %s name must match %s", ErrInvalid, dest, k.Instance, events.TenantPattern)
			}
			return k, instance, nil
		}
	}
	return Kind{}, "", fmt.Errorf("%w %q: want %s", ErrInvalid, dest, Describe())
}

// Check reports whether dest names a destination of a registered kind.
func Check(dest string) error {
	_, _, err := Parse(dest)
	return err
}

// BatchSize returns the default batch size of dest's kind; 0 when it has
// none or dest is not valid.
func BatchSize(dest string) int {
	k, _, err := Parse(dest)
	if err != nil {
		return 0
	}
	return k.BatchSize
}
