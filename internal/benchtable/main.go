// Command benchtable turns `go test -bench` output (stdin) into the
// markdown table `make bench` writes to .bench/results.md. Each benchmark's
// custom metrics (events/s, pairs/s, rows/s, ...) are kept; ns/op, B/op and
// allocs/op are dropped unless a benchmark reports nothing else. Values of
// 1,000 and more are written with thousands separators. A benchmark that
// failed gets a row saying so with its first message, and so does a
// package that failed outside any benchmark (a panic, a build error), so a
// failure never just leaves a row out.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
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
	if cpu != "" {
		cpu = ", " + cpu
	}
	fmt.Fprintf(out, "Measured %s on %s (%d cores%s)", time.Now().UTC().Format("2006-01-02"), host, runtime.NumCPU(), cpu)
	fmt.Fprintf(out, " with `make bench`.\n\n| package | benchmark | result |\n| --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %s | %s |\n", r.pkg, r.name, strings.Join(r.metrics, ", "))
	}
	return nil
}

func parse(in io.Reader) ([]row, string, error) {
	var rows []row
	var pkg, cpu string
	failed := -1 // index of the failed benchmark's row still waiting for its message
	pkgRows := 0 // rows[pkgRows:] are the current package's
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if failed >= 0 {
			if msg, ok := failureMessage(line); ok {
				rows[failed].metrics = []string{"**FAILED**: " + msg}
				failed = -1
				continue
			}
			failed = -1
		}
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(strings.TrimPrefix(line, "pkg: "), "github.com/fairwayhq/fairway/")
		case strings.HasPrefix(line, "cpu: "):
			cpu = strings.TrimPrefix(line, "cpu: ")
		case strings.Contains(line, "--- FAIL: Benchmark"):
			// On its own line when the first run failed, after the
			// benchmark's name when a later one did.
			_, after, _ := strings.Cut(line, "--- FAIL: ")
			name := strings.Fields(after)[0]
			rows = append(rows, row{pkg: pkg, name: strings.TrimPrefix(dropProcs(name), "Benchmark"), metrics: []string{"**FAILED**"}})
			failed = len(rows) - 1
		case strings.HasPrefix(line, "FAIL\t"), strings.HasPrefix(line, "ok  \t"):
			// A package's end. go test prints no "pkg:" line before a
			// benchmark that failed at its first run, so its rows get the
			// name here. A package that failed outside any benchmark (a
			// panic, a build error) gets a row of its own.
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name := strings.TrimPrefix(f[1], "github.com/fairwayhq/fairway/")
			failedRow := false
			for i := pkgRows; i < len(rows); i++ {
				if rows[i].pkg == "" {
					rows[i].pkg = name
				}
				failedRow = failedRow || strings.HasPrefix(rows[i].metrics[0], "**FAILED**")
			}
			if f[0] == "FAIL" && !failedRow {
				rows = append(rows, row{pkg: name, name: "(package)", metrics: []string{"**FAILED** (see the raw output)"}})
			}
			pkgRows, pkg = len(rows), ""
		case strings.HasPrefix(line, "Benchmark"):
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			var custom, std []string
			for i := 2; i+1 < len(f); i += 2 {
				m := groupDigits(f[i]) + " " + f[i+1]
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
			rows = append(rows, row{pkg: pkg, name: strings.TrimPrefix(dropProcs(f[0]), "Benchmark"), metrics: custom})
		}
	}
	return rows, cpu, sc.Err()
}

// dropProcs drops the GOMAXPROCS suffix of a benchmark's name.
func dropProcs(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

// failureMessage returns the message of a log line under "--- FAIL:"
// ("    file_test.go:12: message"), cut to 200 characters, with the
// characters that would break a markdown table cell replaced.
func failureMessage(line string) (string, bool) {
	if !strings.HasPrefix(line, "    ") {
		return "", false
	}
	_, msg, ok := strings.Cut(strings.TrimSpace(line), ": ")
	if !ok {
		return "", false
	}
	if r := []rune(msg); len(r) > 200 {
		msg = string(r[:200]) + "…"
	}
	return strings.NewReplacer("|", "/", "`", "'").Replace(msg), true
}

// groupDigits writes a whole number of 1,000 or more with thousands
// separators ("219969" → "219,969"); anything else is returned as is.
func groupDigits(v string) string {
	if len(v) < 4 || strings.Trim(v, "0123456789") != "" {
		return v
	}
	var b strings.Builder
	for i, c := range v {
		if i > 0 && (len(v)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
