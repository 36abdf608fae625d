package main

import (
	"strings"
	"testing"
)

func TestParseKeepsCustomMetrics(t *testing.T) {
	t.Parallel()
	in := `goos: linux
pkg: github.com/fairwayhq/fairway/pkg/events
cpu: Some CPU
BenchmarkRawAsyncPublish-2   	     100	  2700000 ns/op	    185000 events/s
BenchmarkPlain-2   	     100	  2700 ns/op	  12 B/op
PASS
`
	rows, cpu, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if cpu != "Some CPU" || len(rows) != 2 {
		t.Fatalf("cpu %q rows %v", cpu, rows)
	}
	if rows[0].pkg != "pkg/events" || rows[0].name != "RawAsyncPublish" || strings.Join(rows[0].metrics, ",") != "185000 events/s" {
		t.Fatalf("row 0 = %+v", rows[0])
	}
	if strings.Join(rows[1].metrics, ",") != "2700 ns/op,12 B/op" {
		t.Fatalf("row 1 = %+v", rows[1])
	}
}

func TestRunFailsOnEmptyInput(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := run(strings.NewReader("PASS\n"), &b); err == nil {
		t.Fatal("want an error for input without benchmarks")
	}
}
