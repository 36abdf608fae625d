package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

var fixedNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func opts() DecodeOptions {
	return DecodeOptions{Tenant: "acme", Now: func() time.Time { return fixedNow }}
}

// decodeAll runs a Decoder to its end and returns the items and the final
// error (nil when it was io.EOF).
func decodeAll(t testing.TB, body string, f Format, o DecodeOptions) ([]Decoded, error) {
	t.Helper()
	d := NewDecoder(strings.NewReader(body), f, o)
	var items []Decoded
	for {
		it, err := d.Next()
		if err == io.EOF {
			return items, nil
		}
		if err != nil {
			if _, again := d.Next(); again != err {
				t.Errorf("Next after error %v returned %v", err, again)
			}
			return items, err
		}
		items = append(items, it)
		if len(items) > len(body)+1 {
			t.Fatalf("decoder made more items than the body has bytes")
		}
	}
}

// summary is "ok <product>" or the item error, one per item.
func summary(items []Decoded) []string {
	var out []string
	for _, it := range items {
		if it.Err != nil {
			out = append(out, it.Err.Error())
		} else {
			out = append(out, "ok "+it.Event.ProductID)
		}
	}
	return out
}

func ev(pid string, extra string) string {
	return `{"product_id":"` + pid + `","version":1,"op":"upsert","payload":{"n":1}` + extra + `}`
}

func TestDecoderJSONArray(t *testing.T) {
	t.Parallel()
	body := "\ufeff [\n" + ev("p1", `,"occurred_at":"2024-05-01T12:00:00Z"`) + " ,\n" + ev("p2", `,"tenant":"acme","idempotency_key":"k2"`) + "\n] \n"
	items, err := decodeAll(t, body, FormatJSONArray, opts())
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 {
		t.Fatalf("got %d items: %v", len(items), summary(items))
	}
	want := []Event{
		{Tenant: "acme", ProductID: "p1", Version: 1, Op: OpUpsert, OccurredAt: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), Payload: json.RawMessage(`{"n":1}`)},
		{Tenant: "acme", ProductID: "p2", Version: 1, Op: OpUpsert, OccurredAt: fixedNow, Payload: json.RawMessage(`{"n":1}`), IdempotencyKey: "k2"},
	}
	for i, it := range items {
		if it.Err != nil || it.Index != i || it.Line != 0 {
			t.Errorf("item %d: %+v", i, it)
		}
		if fmt.Sprint(it.Event) != fmt.Sprint(want[i]) {
			t.Errorf("item %d event\n got %+v\nwant %+v", i, it.Event, want[i])
		}
	}
	for _, empty := range []string{"[]", " [ ] ", "[\n]\n"} {
		if items, err := decodeAll(t, empty, FormatJSONArray, opts()); err != nil || len(items) != 0 {
			t.Errorf("%q: %d items, %v", empty, len(items), err)
		}
	}
}

func TestDecoderNDJSON(t *testing.T) {
	t.Parallel()
	lines := []string{
		ev("p1", ""), // 1
		"",           // 2 blank
		`{"product_id":"p3","op":"upsert","payload":{}}`,            // 3
		`{"product_id":"p4",`,                                       // 4
		`{"product_id":"p5","version":2,"op":"upsrt","payload":{}}`, // 5
		"   \t",             // 6 blank
		ev("p7", "") + "\r", // 7 CRLF
		`[1,2]`,             // 8
		ev("p9", ""),        // 9, no final newline
	}
	items, err := decodeAll(t, strings.Join(lines, "\n"), FormatNDJSON, opts())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ok p1",
		"line 3: version is required",
		"line 4: malformed JSON at column 20: unexpected end of JSON input",
		`line 5: op "upsrt" is not one of upsert, delete`,
		"ok p7",
		"line 8: an event must be a JSON object, got array",
		"ok p9",
	}
	if got := summary(items); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("items:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantLines := []int{1, 3, 4, 5, 7, 8, 9}
	for i, it := range items {
		if it.Index != i || it.Line != wantLines[min(i, len(wantLines)-1)] {
			t.Errorf("item %d: Index %d Line %d, want %d %d", i, it.Index, it.Line, i, wantLines[i])
		}
	}
	if !errors.Is(items[2].Err, ErrMalformedJSON) {
		t.Errorf("line 4 error %v is not ErrMalformedJSON", items[2].Err)
	}
	var ve *ValidationError
	if !errors.As(items[1].Err, &ve) || ve.Error() != "version is required" || !errors.Is(items[1].Err, ErrInvalidEvent) {
		t.Errorf("line 3 error %#v: want a *ValidationError without position", items[1].Err)
	}

	if items, err := decodeAll(t, "", FormatNDJSON, opts()); err != nil || len(items) != 0 {
		t.Errorf("empty body: %d items, %v", len(items), err)
	}
	if items, err := decodeAll(t, "\n\n \n", FormatNDJSON, opts()); err != nil || len(items) != 0 {
		t.Errorf("blank body: %d items, %v", len(items), err)
	}
}

// TestDecoderItemErrors checks the message of each per-item problem, the same
// in both formats.
func TestDecoderItemErrors(t *testing.T) {
	t.Parallel()
	deep := `{"a":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`
	tests := []struct {
		name, item, want string
	}{
		{"valid", ev("p", ""), ""},
		{"unknown field", ev("p", `,"colour":"red"`), `unknown field "colour" (fields are case-sensitive: tenant, product_id, version, op, occurred_at, payload, idempotency_key, priority)`},
		{"field case", `{"Product_ID":"p","version":1,"op":"delete"}`, `unknown field "Product_ID" (fields are case-sensitive: tenant, product_id, version, op, occurred_at, payload, idempotency_key, priority)`},
		{"escaped field name", `{"product\u005fid":"p","version":1,"op":"delete"}`, ""},
		{"duplicate field", `{"product_id":"p","version":1,"version":2,"op":"delete"}`, "version appears more than once"},
		{"tenant mismatch", ev("p", `,"tenant":"other"`), `tenant "other" does not match the request's tenant "acme"`},
		{"tenant invalid", ev("p", `,"tenant":"Other"`), `tenant "Other" does not match the request's tenant "acme"`},
		{"version string", `{"product_id":"p","version":"1","op":"delete"}`, "version must be an integer, got string"},
		{"version float", `{"product_id":"p","version":1.5,"op":"delete"}`, `version must be an integer, got "1.5"`},
		{"version exp", `{"product_id":"p","version":1e3,"op":"delete"}`, `version must be an integer, got "1e3"`},
		{"version huge", `{"product_id":"p","version":99999999999999999999,"op":"delete"}`, `version "99999999999999999999" is out of range 1..9223372036854775807`},
		{"version null", `{"product_id":"p","version":null,"op":"delete"}`, "version is required"},
		{"version zero", `{"product_id":"p","version":0,"op":"delete"}`, "version is required"},
		{"version negative", `{"product_id":"p","version":-1,"op":"delete"}`, "version must be >= 1, got -1"},
		{"product id number", `{"product_id":7,"version":1,"op":"delete"}`, "product_id must be a string, got number"},
		{"product id escaped NUL", `{"product_id":"a\u0000","version":1,"op":"delete"}`, `product_id "a\x00" contains control character U+0000 at byte 1`},
		{"op missing", `{"product_id":"p","version":1}`, "op is required"},
		{"occurred_at bad", ev("p", `,"occurred_at":"yesterday"`), `occurred_at "yesterday" is not an RFC 3339 timestamp like 2024-05-01T12:00:00Z`},
		{"occurred_at number", ev("p", `,"occurred_at":1714564800`), "occurred_at must be an RFC 3339 timestamp string, got number"},
		{"occurred_at null means now", ev("p", `,"occurred_at":null`), ""},
		{"payload missing", `{"product_id":"p","version":1,"op":"upsert"}`, "payload is required for upsert"},
		{"payload array", `{"product_id":"p","version":1,"op":"upsert","payload":[]}`, "payload must be a JSON object, got array"},
		{"payload null", `{"product_id":"p","version":1,"op":"upsert","payload":null}`, "payload must be a JSON object, got null"},
		{"payload at depth limit", `{"product_id":"p","version":1,"op":"upsert","payload":` + `{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}}`, ""},
		{"payload too deep", `{"product_id":"p","version":1,"op":"upsert","payload":` + deep + `}`, "payload nests deeper than 64 levels (at byte 68)"},
		{"payload too big", `{"product_id":"p","version":1,"op":"upsert","payload":{"s":"` + strings.Repeat("x", 300000-8) + `"}}`, "payload is 300000 bytes, limit 262144"},
		{"not an object", `"hello"`, "an event must be a JSON object, got string"},
		{"null", `null`, "an event must be a JSON object, got null"},
		{"delete without payload", `{"product_id":"p","version":4,"op":"delete"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, f := range []Format{FormatNDJSON, FormatJSONArray} {
				body, prefix := "\n"+tt.item+"\n", "line 2: "
				if f == FormatJSONArray {
					body, prefix = "["+ev("first", "")+",\n"+tt.item+"]", "element 1: "
				}
				items, err := decodeAll(t, body, f, opts())
				if err != nil {
					t.Fatalf("%v: fatal error %v", f, err)
				}
				it := items[len(items)-1]
				if tt.want == "" {
					if it.Err != nil {
						t.Errorf("%v: %v", f, it.Err)
					} else if err := it.Event.Validate(Limits{}); err != nil {
						t.Errorf("%v: decoded event invalid: %v", f, err)
					}
					continue
				}
				if it.Err == nil || it.Err.Error() != prefix+tt.want {
					t.Errorf("%v:\n got %v\nwant %s", f, it.Err, prefix+tt.want)
				}
				if !errors.Is(it.Err, ErrInvalidEvent) {
					t.Errorf("%v: %v is not ErrInvalidEvent", f, it.Err)
				}
			}
		})
	}
}

func TestDecoderTenant(t *testing.T) {
	t.Parallel()
	o := opts()
	o.Tenant = ""
	items, err := decodeAll(t, ev("p1", `,"tenant":"beta"`)+"\n"+ev("p2", ""), FormatNDJSON, o)
	if err != nil {
		t.Fatal(err)
	}
	if items[0].Err != nil || items[0].Event.Tenant != "beta" {
		t.Errorf("own tenant: %+v", items[0])
	}
	if items[1].Err == nil || items[1].Err.Error() != "line 2: tenant is required" {
		t.Errorf("no tenant anywhere: %v", items[1].Err)
	}
	items, _ = decodeAll(t, ev("p1", `,"tenant":"beta"`), FormatNDJSON, opts())
	if !errors.Is(items[0].Err, ErrTenantMismatch) {
		t.Errorf("mismatch error %v is not ErrTenantMismatch", items[0].Err)
	}
}

func TestDecoderLongLine(t *testing.T) {
	t.Parallel()
	big := func(n int) string { // an event line of exactly n bytes
		base := ev("big", `,"idempotency_key":""`)
		return strings.Replace(base, `"idempotency_key":""`, `"idempotency_key":"`+strings.Repeat("k", n-len(base))+`"`, 1)
	}
	o := opts()
	o.MaxLineBytes = 100
	o.Limits.MaxKeyBytes = 1000
	body := big(100) + "\n" + big(101) + "\n" + ev("after", "") + "\n"
	items, err := decodeAll(t, body, FormatNDJSON, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ok big", "line 2: line is 101 bytes, limit 100", "ok after"}
	if got := summary(items); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if !errors.Is(items[1].Err, ErrLineTooLong) {
		t.Errorf("%v is not ErrLineTooLong", items[1].Err)
	}

	// The same for array elements.
	items, err = decodeAll(t, "["+big(100)+","+big(101)+","+ev("after", "")+"]", FormatJSONArray, o)
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"ok big", "element 1: element is 101 bytes, limit 100", "ok after"}
	if got := summary(items); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}

	// Default limits: a 200 KB line (longer than the read buffer) is fine,
	// a 1 MB line is skipped, then decoding goes on.
	payload := func(n int) string {
		return `{"product_id":"p","version":1,"op":"upsert","payload":{"s":"` + strings.Repeat("x", n) + `"}}`
	}
	body = payload(200<<10) + "\n" + payload(1<<20) + "\n" + ev("after", "")
	items, err = decodeAll(t, body, FormatNDJSON, opts())
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"ok p", fmt.Sprintf("line 2: line is %d bytes, limit %d", len(payload(1<<20)), 256<<10+64<<10), "ok after"}
	if got := summary(items); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDecoderTooManyEvents(t *testing.T) {
	t.Parallel()
	o := opts()
	o.MaxEvents = 2
	for _, f := range []Format{FormatNDJSON, FormatJSONArray} {
		three := ev("a", "") + "\n" + ev("b", "") + "\n\n" + ev("c", "")
		two := ev("a", "") + "\n" + "{}" + "\n\n\n"
		if f == FormatJSONArray {
			three = "[" + ev("a", "") + "," + ev("b", "") + "," + ev("c", "") + "]"
			two = "[" + ev("a", "") + ",{}]"
		}
		items, err := decodeAll(t, three, f, o)
		if !errors.Is(err, ErrTooManyEvents) || len(items) != 2 {
			t.Errorf("%v: %d items, err %v; want 2 items and ErrTooManyEvents", f, len(items), err)
		}
		if err != nil && err.Error() != "too many events: the limit is 2 per request" {
			t.Errorf("%v: message %q", f, err)
		}
		items, err = decodeAll(t, two, f, o)
		if err != nil || len(items) != 2 {
			t.Errorf("%v: exactly the limit: %d items, err %v", f, len(items), err)
		}
	}
}

func TestDecoderBrokenArray(t *testing.T) {
	t.Parallel()
	good := ev("p", "")
	tests := []struct {
		name, body string
		items      int
		want       string
	}{
		{"broken element", "[" + good + `,{"product_id":}` + "," + good + "]", 1, `malformed JSON at byte 78: element 1: invalid character '}' looking for beginning of value`},
		{"missing comma", "[" + good + " " + good + "]", 1, `malformed JSON at byte 64: expected ',' or ']' after an element, found '{'`},
		{"trailing comma", "[" + good + ",]", 1, `malformed JSON at byte 64: expected an event, found ']'`},
		{"unterminated", "[" + good, 1, `malformed JSON at byte 63: unexpected end of body inside the array`},
		{"unterminated element", "[" + good + `,{"a":"b`, 1, `malformed JSON at byte 71: unexpected end of body inside the array`},
		{"garbage after", "[" + good + "] x", 1, `malformed JSON at byte 65: unexpected 'x' after the closing ']'`},
		{"second array", "[][]", 0, `malformed JSON at byte 2: unexpected '[' after the closing ']'`},
		{"object body", good, 0, `malformed JSON at byte 0: expected '[' to start the array of events, found '{'`},
		{"empty body", "  ", 0, `malformed JSON at byte 2: empty body; expected a JSON array of events`},
		{"nesting beyond encoding/json", "[" + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "]", 0, "malformed JSON at byte 10001: element 0: invalid character '[' exceeded max depth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			items, err := decodeAll(t, tt.body, FormatJSONArray, opts())
			if len(items) != tt.items {
				t.Errorf("%d items before the error, want %d: %v", len(items), tt.items, summary(items))
			}
			for _, it := range items {
				if it.Err != nil {
					t.Errorf("item before the error: %v", it.Err)
				}
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("error\n got %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrMalformedJSON) {
				t.Errorf("%v is not ErrMalformedJSON", err)
			}
		})
	}
}

func TestDecoderDeepNestingNDJSON(t *testing.T) {
	t.Parallel()
	line := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	items, err := decodeAll(t, line+"\n"+ev("p", ""), FormatNDJSON, opts())
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(items); len(got) != 2 || got[0] != "line 1: malformed JSON at column 10001: invalid character '[' exceeded max depth" || got[1] != "ok p" {
		t.Errorf("got %q", got)
	}
}

// TestDecoderReadError: a body cut by http.MaxBytesReader ends decoding with
// an error errors.As finds; items before it stay valid.
func TestDecoderReadError(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{FormatNDJSON, FormatJSONArray} {
		body := ev("a", "") + "\n" + ev("b", "") + "\n" + ev("c", "") + "\n"
		if f == FormatJSONArray {
			body = "[" + ev("a", "") + ",\n" + ev("b", "") + ",\n" + ev("c", "") + "]"
		}
		limit := int64(2*len(ev("a", "")) + 10)
		r := http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(body)), limit)
		d := NewDecoder(r, f, opts())
		var ok int
		var err error
		for {
			var it Decoded
			it, err = d.Next()
			if err != nil {
				break
			}
			if it.Err != nil {
				t.Errorf("%v: item error %v", f, it.Err)
			}
			ok++
		}
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) || mbe.Limit != limit {
			t.Errorf("%v: error %v, want *http.MaxBytesError", f, err)
		}
		if ok != 2 {
			t.Errorf("%v: %d items before the error, want 2", f, ok)
		}
	}
}

// TestDecoderStreams: Next returns an item before the rest of the body has
// been written, so a body is never held in memory whole.
func TestDecoderStreams(t *testing.T) {
	t.Parallel()
	for _, f := range []Format{FormatNDJSON, FormatJSONArray} {
		pr, pw := io.Pipe()
		first, rest := ev("a", "")+"\n", ev("b", "")+"\n"
		if f == FormatJSONArray {
			first, rest = "["+ev("a", ""), ","+ev("b", "")+"]"
		}
		go func() {
			_, _ = io.WriteString(pw, first)
			_, _ = io.WriteString(pw, rest) // blocks until the decoder reads on
			pw.Close()
		}()
		d := NewDecoder(pr, f, opts())
		it, err := d.Next()
		if err != nil || it.Err != nil || it.Event.ProductID != "a" {
			t.Fatalf("%v: first item %+v, %v", f, it, err)
		}
		it, err = d.Next()
		if err != nil || it.Err != nil || it.Event.ProductID != "b" {
			t.Fatalf("%v: second item %+v, %v", f, it, err)
		}
		if _, err := d.Next(); err != io.EOF {
			t.Fatalf("%v: end: %v", f, err)
		}
	}
}

func TestDecoderDefaultNow(t *testing.T) {
	t.Parallel()
	before := time.Now()
	items, err := decodeAll(t, ev("p", ""), FormatNDJSON, DecodeOptions{Tenant: "acme"})
	if err != nil || items[0].Err != nil {
		t.Fatal(err, items)
	}
	if at := items[0].Event.OccurredAt; at.Before(before) || at.After(time.Now()) {
		t.Errorf("occurred_at %v is not the decode time", at)
	}
}

func TestFormatFromContentType(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ct   string
		want Format
		err  string
	}{
		{"application/json", FormatJSONArray, ""},
		{"Application/JSON; charset=UTF-8", FormatJSONArray, ""},
		{"application/x-ndjson", FormatNDJSON, ""},
		{"application/x-ndjson; charset=utf-8", FormatNDJSON, ""},
		{"application/ndjson", FormatNDJSON, ""},
		{"application/jsonlines", FormatNDJSON, ""},
		{"application/jsonl", FormatNDJSON, ""},
		{"", 0, "unsupported content type: missing Content-Type; use application/json or application/x-ndjson"},
		{"text/plain", 0, `unsupported content type: "text/plain"; use application/json or application/x-ndjson`},
		{"application/json; charset=latin1", 0, `unsupported content type: charset "latin1"; only utf-8 is accepted`},
		{"application/json;;", 0, `unsupported content type: "application/json;;": mime: invalid media parameter`},
	}
	for _, tt := range tests {
		got, err := FormatFromContentType(tt.ct)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("FormatFromContentType(%q) = %v, %v; want %v", tt.ct, got, err, tt.want)
			}
			continue
		}
		if err == nil || err.Error() != tt.err || !errors.Is(err, ErrUnsupportedContentType) {
			t.Errorf("FormatFromContentType(%q) error\n got %v\nwant %s", tt.ct, err, tt.err)
		}
	}
}

func fuzzDecoder(t *testing.T, data []byte, f Format) {
	o := DecodeOptions{
		Tenant:       "acme",
		Limits:       Limits{MaxPayloadBytes: 512, MaxProductIDBytes: 32, MaxKeyBytes: 32},
		MaxLineBytes: 600,
		MaxEvents:    50,
		Now:          func() time.Time { return fixedNow },
	}
	d := NewDecoder(bytes.NewReader(data), f, o)
	lastLine := 0
	for i := 0; ; i++ {
		it, err := d.Next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrMalformedJSON) && !errors.Is(err, ErrTooManyEvents) {
				t.Fatalf("unexpected fatal error %v", err)
			}
			if f == FormatNDJSON && errors.Is(err, ErrMalformedJSON) {
				t.Fatalf("NDJSON never fails the whole body on syntax: %v", err)
			}
			return
		}
		if i > len(data) {
			t.Fatalf("more items than bytes")
		}
		if it.Index != i {
			t.Fatalf("item %d has Index %d", i, it.Index)
		}
		if f == FormatNDJSON {
			if it.Line <= lastLine {
				t.Fatalf("line %d after line %d", it.Line, lastLine)
			}
			lastLine = it.Line
		}
		if it.Err != nil {
			var ie *ItemError
			if !errors.As(it.Err, &ie) || !errors.Is(it.Err, ErrInvalidEvent) {
				t.Fatalf("item error %#v is not an *ItemError that is ErrInvalidEvent", it.Err)
			}
			continue
		}
		e := it.Event
		if err := e.Validate(o.Limits); err != nil {
			t.Fatalf("valid item fails Validate: %v (%+v)", err, e)
		}
		if e.Tenant != "acme" {
			t.Fatalf("tenant %q", e.Tenant)
		}
		m, err := e.Msg()
		if err != nil {
			t.Fatalf("Msg of a valid event: %v", err)
		}
		back, err := Decode(m.Data)
		if err != nil {
			t.Fatalf("Decode(Msg().Data): %v\n%s", err, m.Data)
		}
		if back.ProductID != e.ProductID || back.Version != e.Version || back.Op != e.Op || back.Key() != e.Key() || !back.OccurredAt.Equal(e.OccurredAt) || !bytes.Equal(back.Payload, e.Payload) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", back, e)
		}
	}
}

func fuzzSeeds(f *testing.F, array bool) {
	seeds := []string{
		ev("p", ""),
		ev("p", `,"occurred_at":"2024-05-01T12:00:00.5+02:00","idempotency_key":"k"`),
		`{"product_id":"p","version":1,"op":"delete"}`,
		`{"product_id":"p\u0000","version":1e2,"op":"upsrt","payload":[]}`,
		`{"product_id":"p","version":1,"op":"upsert","payload":{"a":[[[{"b":"\"]"}]]]}}`,
		`{"tenant":"other","product_id":"p","version":1,"op":"delete","x":1}`,
		`{"product_id":"é\ud83d\ude00","version":9223372036854775807,"op":"delete","payload":{}}`,
		`not json`, `[]`, `null`, `"s"`, `{`, `}`, `]`, `[`,
	}
	for _, s := range seeds {
		if array {
			f.Add([]byte("[" + s + "]"))
			f.Add([]byte("[" + s + ",\n" + s + "]"))
		} else {
			f.Add([]byte(s))
			f.Add([]byte(s + "\n\n" + s + "\r\n"))
		}
	}
	f.Add([]byte("\xef\xbb\xbf[ ]"))
	f.Add([]byte(strings.Repeat("[", 100)))
}

func FuzzDecodeNDJSON(f *testing.F) {
	fuzzSeeds(f, false)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecoder(t, data, FormatNDJSON) })
}

func FuzzDecodeJSONArray(f *testing.F) {
	fuzzSeeds(f, true)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzDecoder(t, data, FormatJSONArray) })
}

func BenchmarkDecodeNDJSON(b *testing.B) {
	var body strings.Builder
	const n = 1000
	for i := range n {
		fmt.Fprintf(&body, `{"product_id":"sku-%d","version":%d,"op":"upsert","occurred_at":"2024-05-01T12:00:00Z","payload":{"name":"Widget %d","price":9.5,"tags":["a","b"],"desc":"%s"}}`+"\n", i, i+1, i, strings.Repeat("x", 150))
	}
	s := body.String()
	b.SetBytes(int64(len(s)))
	b.ResetTimer()
	for b.Loop() {
		d := NewDecoder(strings.NewReader(s), FormatNDJSON, opts())
		for {
			it, err := d.Next()
			if err == io.EOF {
				break
			}
			if err != nil || it.Err != nil {
				b.Fatal(err, it.Err)
			}
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
}
