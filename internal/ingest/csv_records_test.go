package ingest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// csvItem is one thing a CSV reader returned: a record or a parse error,
// and the line it starts on; size is the bytes it took from the input.
type csvItem struct {
	rec  []string
	err  error
	line int
	size int64
}

func (it csvItem) String() string {
	return fmt.Sprintf("{line %d %q err %v size %d}", it.line, it.rec, it.err, it.size)
}

// plainCSV reads in as encoding/csv does on its own, the whole input at once.
func plainCSV(t *testing.T, in string) []csvItem {
	t.Helper()
	cr := csv.NewReader(strings.NewReader(in))
	cr.FieldsPerRecord = -1
	var out []csvItem
	var offset int64
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		it := csvItem{size: cr.InputOffset() - offset}
		offset = cr.InputOffset()
		var pe *csv.ParseError
		switch {
		case errors.As(err, &pe):
			it.err, it.line = pe.Err, pe.StartLine
		case err != nil:
			t.Fatalf("encoding/csv: %v", err)
		default:
			it.rec = rec
			it.line, _ = cr.FieldPos(0)
		}
		out = append(out, it)
	}
}

// boundedCSV reads in with csvRecords and a record limit of max bytes.
func boundedCSV(t *testing.T, in string, max int) []csvItem {
	t.Helper()
	cr := newCSVRecords(strings.NewReader(in), max)
	var out []csvItem
	for {
		rec, line, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		it := csvItem{line: line}
		var pe *csv.ParseError
		switch {
		case errors.As(err, &pe):
			it.err = pe.Err
		case errors.Is(err, ErrRecordTooLong):
			it.err = err
		case err != nil:
			t.Fatalf("csvRecords: %v", err)
		default:
			it.rec = slices.Clone(rec)
		}
		out = append(out, it)
	}
}

// FuzzCSVRecords holds csvRecords to encoding/csv: with a limit no record
// reaches, both return the same records and parse errors on the same
// lines, so the recordSplitter ends every record where encoding/csv does.
// With a small limit, each record over it stands where encoding/csv
// returns a record (or parse error) of more than the limit, and the rest
// agree.
func FuzzCSVRecords(f *testing.F) {
	for _, s := range []string{
		"a,b,c\n1,2,3\n",
		"a,\"b\nc\",d\n\"e\"\"f\",g\n",
		"\"unclosed\nx,y\n",
		"a\"b,\"c\nd\"\ne\n",            // a bare quote drops the rest of its line
		"\"a\"x,\"b\nc\"\nd\n",          // so does a closing quote followed by text
		"\n\r\n\na,b\r\n\"c\r\nd\"\r\n", // empty lines and CRLF
		"\"a\"\r,b\n",
		"x,\"\"\n\"\"\"\",y",
		"a,b\r",
		"\"",
		",\n,,\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		plain := plainCSV(t, in)
		if got := boundedCSV(t, in, 1<<20); !slices.EqualFunc(plain, got, sameItem) {
			t.Fatalf("input %q:\nencoding/csv %+v\ncsvRecords   %+v", in, plain, got)
		}
		const small = 8
		got := boundedCSV(t, in, small)
		if len(got) != len(plain) {
			t.Fatalf("input %q, limit %d:\nencoding/csv %+v\ncsvRecords   %+v", in, small, plain, got)
		}
		for i, g := range got {
			p := plain[i]
			if errors.Is(g.err, ErrRecordTooLong) {
				if g.line != p.line || p.size <= small {
					t.Fatalf("input %q, limit %d: item %d is over the limit, encoding/csv read %+v", in, small, i, p)
				}
				continue
			}
			if !sameItem(p, g) {
				t.Fatalf("input %q, limit %d: item %d is %+v, encoding/csv read %+v", in, small, i, g, p)
			}
		}
	})
}

func sameItem(a, b csvItem) bool {
	return a.line == b.line && slices.Equal(a.rec, b.rec) && errors.Is(a.err, b.err) && errors.Is(b.err, a.err)
}
