// Command benchtable turns `go test -bench` output (stdin) into the
// markdown table `make bench` writes to .bench/results.md. Each benchmark's
// custom metrics (events/s, pairs/s, rows/s, ...) are kept; ns/op, B/op and
// allocs/op are dropped unless a benchmark reports nothing else.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

type row struct {
	pkg, name string
	metrics   []string
}

func run(in io.Reader, out io.Writer) error {
	rows, cpu, err := parse(in)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("no benchmark results in input")
	}
	host, _ := os.Hostname()
	fmt.Fprintf(out, "Measured %s on %s (%d cores, %s)", time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), cpu)
	fmt.Fprintf(out, " with `make bench`.\n\n| package | benchmark | result |\n| --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %s | %s |\n", r.pkg, r.name, strings.Join(r.metrics, ", "))
	}
	return nil
}

func parse(in io.Reader) ([]row, string, error) {
	var rows []row
	var pkg, cpu string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(strings.TrimPrefix(line, "pkg: "), "github.com/fairwayhq/fairway/")
		case strings.HasPrefix(line, "cpu: "):
			cpu = strings.TrimPrefix(line, "cpu: ")
		case strings.HasPrefix(line, "Benchmark"):
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			name := f[0]
			if i := strings.LastIndex(name, "-"); i > 0 {
				name = name[:i] // drop the GOMAXPROCS suffix
			}
			var custom, std []string
			for i := 2; i+1 < len(f); i += 2 {
				m := f[i] + " " + f[i+1]
				switch f[i+1] {
				case "ns/op", "B/op", "allocs/op", "MB/s":
					std = append(std, m)
				default:
					custom = append(custom, m)
				}
			}
			if len(custom) == 0 {
				custom = std
			}
			rows = append(rows, row{pkg: pkg, name: strings.TrimPrefix(name, "Benchmark"), metrics: custom})
		}
	}
	return rows, cpu, sc.Err()
}
