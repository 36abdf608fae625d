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
	if rows[0].pkg != "pkg/events" || rows[0].name != "RawAsyncPublish" || strings.Join(rows[0].metrics, ",") != "185,000 events/s" {
		t.Fatalf("row 0 = %+v", rows[0])
	}
	if strings.Join(rows[1].metrics, ",") != "2,700 ns/op,12 B/op" {
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

func TestParseReportsFailures(t *testing.T) {
	t.Parallel()
	in := `--- FAIL: BenchmarkEndToEnd
    e2e_bench_test.go:51: start the pipeline: ClickHouse at 127.0.0.1:9000: connection refused | more
        (start both with ` + "`make services`" + `)
    e2e_test.go:79: pipeline logs: /tmp/x.log
FAIL
exit status 1
FAIL	github.com/fairwayhq/fairway/cmd/fairway	0.199s
pkg: github.com/fairwayhq/fairway/internal/dispatch
BenchmarkNoisy-2   	       1	 1000 ns/op	 5 p99_ms
BenchmarkLater-2   	       2	 1000 ns/op	--- FAIL: BenchmarkLater-2
    noisy_test.go:10: timeout
FAIL
FAIL	github.com/fairwayhq/fairway/internal/dispatch	9.1s
pkg: github.com/fairwayhq/fairway/internal/ingest
BenchmarkIngest/http-2   	     100	  2700000 ns/op	    130202 events/s
    --- FAIL: BenchmarkIngest/http-2
        bench_test.go:70: status 503
FAIL
FAIL	github.com/fairwayhq/fairway/internal/ingest	12.5s
pkg: github.com/fairwayhq/fairway/pkg/events
panic: boom
FAIL	github.com/fairwayhq/fairway/pkg/events	0.5s
FAIL	github.com/fairwayhq/fairway/sinks/b2b [build failed]
`
	rows, _, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{"cmd/fairway", "EndToEnd", []string{"**FAILED**: start the pipeline: ClickHouse at 127.0.0.1:9000: connection refused / more"}},
		{"internal/dispatch", "Noisy", []string{"5 p99_ms"}},
		{"internal/dispatch", "Later", []string{"**FAILED**: timeout"}},
		{"internal/ingest", "Ingest/http", []string{"130,202 events/s"}},
		{"internal/ingest", "Ingest/http", []string{"**FAILED**: status 503"}},
		{"pkg/events", "(package)", []string{"**FAILED** (see the raw output)"}},
		{"sinks/b2b", "(package)", []string{"**FAILED** (see the raw output)"}},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i].pkg != want[i].pkg || rows[i].name != want[i].name || strings.Join(rows[i].metrics, ",") != strings.Join(want[i].metrics, ",") {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestGroupDigits(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0": "0", "999": "999", "1000": "1,000", "30000": "30,000", "219969": "219,969",
		"26426196295": "26,426,196,295", "12.5": "12.5", "1.5e+06": "1.5e+06", "-1234": "-1234",
	} {
		if got := groupDigits(in); got != want {
			t.Errorf("groupDigits(%q) = %q, want %q", in, got, want)
		}
	}
}
