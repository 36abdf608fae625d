package kind_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/sink/kind"
)

// The registry, row by row: a change to a kind shows here.
func TestAll(t *testing.T) {
	t.Parallel()
	want := []kind.Kind{
		{Name: "postgres"},
		{Name: "clickhouse", BatchSize: 5_000},
		{Name: "b2b", Instance: "partner"},
	}
	got := kind.All()
	if len(got) != len(want) {
		t.Fatalf("All() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("kind %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	got[0].Name = "changed"
	if kind.All()[0].Name != "postgres" {
		t.Error("All returns the registry itself, not a copy")
	}
	if d := kind.Describe(); d != "postgres, clickhouse or b2b:<partner>" {
		t.Errorf("Describe() = %q", d)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dest, kind, instance string
		batch                int
	}{
		{"postgres", "postgres", "", 0},
		{"clickhouse", "clickhouse", "", 5_000},
		{"b2b:erp", "b2b", "erp", 0},
		{"b2b:a", "b2b", "a", 0},
		{"b2b:0-x_y", "b2b", "0-x_y", 0},
		{"b2b:" + strings.Repeat("p", 63), "b2b", strings.Repeat("p", 63), 0},
	} {
		k, inst, err := kind.Parse(tc.dest)
		if err != nil || k.Name != tc.kind || inst != tc.instance || k.BatchSize != tc.batch {
			t.Errorf("Parse(%q) = %+v, %q, %v; want kind %s, instance %q, batch %d", tc.dest, k, inst, err, tc.kind, tc.instance, tc.batch)
		}
		if err := kind.Check(tc.dest); err != nil {
			t.Errorf("Check(%q) = %v", tc.dest, err)
		}
		if got := kind.BatchSize(tc.dest); got != tc.batch {
			t.Errorf("BatchSize(%q) = %d, want %d", tc.dest, got, tc.batch)
		}
	}
	for dest, inMsg := range map[string]string{
		"":                               "want postgres, clickhouse or b2b:<partner>",
		"s3":                             "want postgres",
		"Postgres":                       "want postgres",
		"postgres:x":                     "want postgres",
		"clickhouse:":                    "want postgres",
		"b2b":                            "want postgres",
		"b2b:":                           "partner name must match",
		"b2b:Erp":                        "partner name must match",
		"b2b:a.b":                        "partner name must match",
		"b2b:a:b":                        "partner name must match",
		"b2b:-a":                         "partner name must match",
		"b2b:" + strings.Repeat("p", 64): "partner name must match",
		"work.postgres":                  "want postgres",
		"b2b:erp ":                       "partner name must match",
		" postgres":                      "want postgres",
	} {
		_, _, err := kind.Parse(dest)
		if !errors.Is(err, kind.ErrInvalid) || !strings.Contains(err.Error(), inMsg) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid saying %q", dest, err, inMsg)
		}
		if kind.BatchSize(dest) != 0 {
			t.Errorf("BatchSize(%q) = %d, want 0", dest, kind.BatchSize(dest))
		}
	}
}
