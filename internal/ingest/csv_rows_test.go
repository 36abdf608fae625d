package ingest

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

var csvNow = func() time.Time { return time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC) }

func readAll(t testing.TB, csv string, maxRecord int) ([]CSVRow, error) {
	rows, err := newCSVRows(strings.NewReader(csv), "acme", events.Limits{}, maxRecord, csvNow)
	if err != nil {
		return nil, err
	}
	var out []CSVRow
	for {
		r, err := rows.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

func TestCSVRowsMapColumns(t *testing.T) {
	t.Parallel()
	rows, err := readAll(t, "\ufeffProduct_ID, version ,op,occurred_at,idempotency_key,name,price\n"+
		"p1,7,delete,2026-01-02T03:04:05Z,k-1,Chair,10\n"+
		"p2,8,,,,\"Table, oak\",20\n", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Err != nil || rows[1].Err != nil {
		t.Fatalf("rows %+v", rows)
	}
	d, u := rows[0].Event, rows[1].Event
	if d.Op != events.OpDelete || d.Version != 7 || d.IdempotencyKey != "k-1" || d.Payload != nil ||
		!d.OccurredAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || rows[0].Line != 2 {
		t.Fatalf("delete row %+v", rows[0])
	}
	if u.Op != events.OpUpsert || !u.OccurredAt.Equal(csvNow()) || string(u.Payload) != `{"name":"Table, oak","price":"20"}` || rows[1].Line != 3 {
		t.Fatalf("upsert row %+v payload %s", rows[1], u.Payload)
	}
}

func TestCSVRowsHeaderErrors(t *testing.T) {
	t.Parallel()
	for name, header := range map[string]string{
		"duplicate column": "product_id,version,name,NAME\n",
		"empty column":     "product_id,,version\n",
		"no product_id":    "sku,version\n",
		"broken quote":     "\"product_id,version\n",
	} {
		if _, err := readAll(t, header, 1<<20); !errors.Is(err, ErrBadCSV) {
			t.Errorf("%s: err %v, want ErrBadCSV", name, err)
		}
	}
}

// A record over the limit, whether one endless line or a quoted field over
// many lines, is a row error naming its lines and the limit, and the rows
// after it are read as usual.
func TestCSVRowsSkipOverLongRecords(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 600)
	for name, c := range map[string]struct {
		csv, want string
		next      int // line of the row after the long one; 0: there is none
	}{
		"endless line": {"product_id,version,name\np1,1,a\np2,1," + long + long + "\np3,1,c\n",
			"the record on line 3 has more than 1024 bytes", 4},
		"quoted field over many lines": {"product_id,version,name\np1,1,a\np2,1,\"" + long + "\n" + long + "\n\"\np3,1,c\n",
			"the record on lines 3-5 has more than 1024 bytes", 6},
		"unclosed quote": {"product_id,version,name\np1,1,a\np2,1,\"" + long + "\n" + long + "\np3,1,c\n",
			"the record on lines 3-5 has more than 1024 bytes, the limit per CSV record; a quoted field in it is not closed before the end of the file", 0},
		"no newline at the end": {"product_id,version,name\np1,1,a\np2,1," + long + long,
			"the record on line 3 has more than 1024 bytes", 0},
	} {
		rows, err := readAll(t, c.csv, 1024)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want := 2
		if c.next > 0 {
			want = 3
		}
		if len(rows) != want || rows[0].Err != nil || rows[1].Line != 3 || !errors.Is(rows[1].Err, ErrRecordTooLong) ||
			!strings.Contains(rows[1].Err.Error(), c.want) {
			t.Errorf("%s: rows %+v, want row 2 at line 3 failing with %q", name, rows, c.want)
			continue
		}
		if c.next > 0 && (rows[2].Err != nil || rows[2].Event.ProductID != "p3" || rows[2].Line != c.next) {
			t.Errorf("%s: the row after the long one is %+v", name, rows[2])
		}
	}
}

// FuzzCSVRows: no input panics the reader, every accepted row is a valid
// event of the tenant, and line numbers only grow.
func FuzzCSVRows(f *testing.F) {
	f.Add("product_id,version,op,name\np1,1,upsert,x\np2,2,delete,\n")
	f.Add("product_id,version\n\"p\"\"1\",3\n,\n\"unterminated\n")
	f.Add("version,product_id,occurred_at\n1,a,2026-11-20T10:00:00+02:00\n")
	f.Fuzz(func(t *testing.T, csv string) {
		rows, err := newCSVRows(strings.NewReader(csv), "acme", events.Limits{}, 4096, csvNow)
		if err != nil {
			if !errors.Is(err, ErrBadCSV) {
				t.Fatalf("header error %v is not ErrBadCSV", err)
			}
			return
		}
		last := 0
		for i := 0; i < 10_000; i++ {
			r, err := rows.Next()
			if err != nil {
				return
			}
			if r.Line < last {
				t.Fatalf("line %d after line %d", r.Line, last)
			}
			last = r.Line
			if r.Err == nil {
				if err := r.Event.Validate(events.Limits{}); err != nil || r.Event.Tenant != "acme" {
					t.Fatalf("accepted row %+v is invalid: %v", r, err)
				}
			}
		}
	})
}
