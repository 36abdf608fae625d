package sinks

import (
	"testing"

	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// Every registered sink kind has a constructor here, and nothing else
// does: adding a kind to internal/sink/kind without one fails.
func TestEveryKindOpens(t *testing.T) {
	t.Parallel()
	for _, k := range kind.All() {
		if ks, ok := opens[k.Name]; !ok || ks.open == nil {
			t.Errorf("kind %s has no constructor in package sinks", k.Name)
		}
	}
	if len(opens) != len(kind.All()) {
		t.Errorf("package sinks opens %d kinds, the registry has %d", len(opens), len(kind.All()))
	}
}

func TestConcurrency(t *testing.T) {
	t.Parallel()
	for dest, want := range map[string]int{"postgres": 0, "clickhouse": clickhouse.ConcurrencyDefault, "b2b:erp": 0, "nowhere": 0} {
		if got := Concurrency(dest); got != want {
			t.Errorf("Concurrency(%q) = %d, want %d", dest, got, want)
		}
	}
}
