package b2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

func transformRecord(payload string) *sink.Record {
	return &sink.Record{Seq: 42, Event: events.Event{Tenant: "acme", ProductID: "sku-1", Version: 7, Op: events.OpUpsert,
		OccurredAt: time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC), Payload: json.RawMessage(payload)}}
}

const transformPayload = `{"name":"Hammer","price":12.99,"currency":"EUR","stock":0,"tags":["tools","garden"],"dims":{"w":3,"h":1.5},"weird.key":true}`

func TestTransformCompileRefusesBadExpressions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		t    Transform
		want string
	}{
		{"syntax", Transform{Map: `{"a": event.product_id`}, "Syntax error"},
		{"unknown function", Transform{Map: `frobnicate(event.seq)`}, "undeclared reference to 'frobnicate'"},
		{"unknown variable", Transform{Filter: `product.op == "upsert"`}, "undeclared reference to 'product'"},
		{"filter not bool", Transform{Filter: `event.op + "x"`}, "want bool"},
		{"blank", Transform{Filter: "  "}, "blank"},
		{"too long", Transform{Map: strings.Repeat(" ", TransformMaxLen) + "1"}, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.t.compile()
			if !errors.Is(err, ErrInvalidTransform) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("compile(%+v) = %v; want ErrInvalidTransform saying %q", tc.t, err, tc.want)
			}
		})
	}
	if tr, err := (Transform{}).compile(); tr != nil || err != nil {
		t.Fatalf("zero Transform compiles to %v, %v; want nil, nil", tr, err)
	}
}

func TestTransformApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, filter, mapping, payload string
		op                             events.Op
		want                           string // "" when filtered out
	}{
		{name: "typical mapping keeps the written key order",
			mapping: `{"sku": event.product_id, "title": event.payload.name, "price_cents": int(math.round(event.payload.price * 100.0)), "version": event.version}`,
			want:    `{"sku":"sku-1","title":"Hammer","price_cents":1299,"version":7}`},
		{name: "a map built otherwise has sorted keys",
			mapping: `event.payload.stock > 0 ? {"z": 1, "a": "in"} : {"z": 0, "a": "out"}`,
			want:    `{"a":"out","z":0}`},
		{name: "payload parts pass through as they are",
			mapping: `{"id": event.product_id, "dims": event.payload.dims, "tags": event.payload.tags}`,
			want:    `{"id":"sku-1","dims":{"w":3,"h":1.5},"tags":["tools","garden"]}`},
		{name: "timestamps, doubles, optional, has, string functions",
			mapping: `{"at": event.occurred_at, "w": event.payload.dims.w, "sale": event.payload.?sale.orValue(false), "priced": has(event.payload.price), "name": event.payload.name.upperAscii(), "key": event.payload["weird.key"]}`,
			want:    `{"at":"2025-03-14T15:09:26Z","w":3,"sale":false,"priced":true,"name":"HAMMER","key":true}`},
		{name: "a list", mapping: `[event.seq, event.payload.tags[1], event.payload.tags.size()]`, want: `[42,"garden",2]`},
		{name: "filter only sends the event as it is", filter: `event.op == "upsert"`,
			want: `{"seq":42,"product_id":"sku-1","version":7,"op":"upsert","occurred_at":"2025-03-14T15:09:26Z","payload":` + transformPayload + `}`},
		{name: "filter drops", filter: `event.payload.stock > 0`, mapping: `{"id": event.product_id}`, want: ""},
		// The examples of docs/partners.md.
		{name: "docs: optional", mapping: `{"c": event.payload.?colour.orValue("none"), "d": has(event.payload.colour) ? event.payload.colour : "none"}`,
			want: `{"c":"none","d":"none"}`},
		{name: "docs: category filter", filter: `event.op == "delete" || event.payload.?category.orValue("") == "garden"`, want: ""},
		{name: "docs: priced filter", filter: `event.op == "upsert" && event.payload.price > 0`, mapping: `{"id": event.product_id}`, want: `{"id":"sku-1"}`},
		{name: "docs: whole payload", mapping: `{"sku": event.product_id, "data": event.payload}`, want: `{"sku":"sku-1","data":` + transformPayload + `}`},
		{name: "docs: nested, lists, strings", mapping: `[event.payload.dims.w, event.payload.tags.size(), "garden" in event.payload.tags, event.payload.name.upperAscii(), event.payload.name.replace("H", "J")]`,
			want: `[3,2,true,"HAMMER","Jammer"]`},
		{name: "docs: deletion", op: events.OpDelete, mapping: `event.op == "delete" ? {"id": event.product_id, "deleted": true} : {"id": event.product_id, "name": event.payload.name}`,
			want: `{"deleted":true,"id":"sku-1"}`},
		{name: "filter on a delete", filter: `!has(event.payload)`, op: events.OpDelete, mapping: `{"id": event.product_id, "deleted": event.op == "delete"}`,
			want: `{"id":"sku-1","deleted":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := Transform{Filter: tc.filter, Map: tc.mapping}.compile()
			if err != nil {
				t.Fatal(err)
			}
			r := transformRecord(transformPayload)
			if tc.op == events.OpDelete {
				r.Event.Op, r.Event.Payload = events.OpDelete, nil
			}
			got, keep, err := tr.apply([]byte("x"), tr.newEvent(), r)
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			switch {
			case tc.want == "" && (keep || string(got) != "x"):
				t.Fatalf("apply = %q, keep %v; want the event dropped and the buffer unchanged", got, keep)
			case tc.want != "" && (!keep || string(got) != "x"+tc.want):
				t.Fatalf("apply = %q, keep %v; want x%s", got, keep, tc.want)
			}
		})
	}
}

// One eventValue serves record after record: each gives what it gives
// on its own, whatever came before it (a failure, an evaluation whose
// cost CEL tracks, another payload).
func TestTransformEventValueServesRecordAfterRecord(t *testing.T) {
	t.Parallel()
	tr, err := Transform{Filter: `has(event.payload.price)`,
		Map: `{"sku": event.product_id, "p": event.payload.price * 2.0, "n": event.payload.name, "tags": event.payload.tags.map(t, t.upperAscii())}`}.compile()
	if err != nil {
		t.Fatal(err)
	}
	ev := tr.newEvent()
	for range 2 {
		for _, payload := range []string{transformPayload, `{"price":"x","tags":[]}`, `{"name":"no price"}`, `[1]`, `{"price":1,"name":"b","tags":["t"]}`} {
			got, keep, err := tr.apply(nil, ev, transformRecord(payload))
			want, wantKeep, wantErr := tr.apply(nil, tr.newEvent(), transformRecord(payload))
			if string(got) != string(want) || keep != wantKeep || fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("%s: reused %s, %v, %v; fresh %s, %v, %v", payload, got, keep, err, want, wantKeep, wantErr)
			}
		}
	}
}

// A payload may be any JSON value, with white space around it.
func TestTransformPayloadNotAnObject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ payload, mapping, want string }{
		{" [3, \"x\"]\n", `{"first": event.payload[0], "n": event.payload.size(), "all": event.payload}`, "{\"first\":3,\"n\":2,\"all\":[3, \"x\"]\n}"},
		{` "just text" `, `{"p": event.payload, "upper": event.payload.upperAscii()}`, `{"p":"just text","upper":"JUST TEXT"}`},
		{"\t42 ", `[event.payload, event.payload + 1.0]`, `[42,43]`},
		{` {"name": "spaced"} `, `{"n": event.payload.name, "all": event.payload}`, `{"n":"spaced","all":{"name": "spaced"} }`},
	} {
		tr, err := Transform{Map: tc.mapping}.compile()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := tr.apply(nil, tr.newEvent(), transformRecord(tc.payload))
		if err != nil || string(got) != tc.want {
			t.Fatalf("%s on %q = %s, %v; want %s", tc.mapping, tc.payload, got, err, tc.want)
		}
	}
}

// An object literal is written by objectPlan, not by CEL's map: both must
// give the same object and the same errors.
func TestTransformObjectPlanAgreesWithCEL(t *testing.T) {
	t.Parallel()
	for _, mapping := range []string{
		`{"sku": event.product_id, "title": event.payload.name, "price_cents": int(math.round(event.payload.price * 100.0))}`,
		`{"w": event.payload.dims.w, "h": event.payload.dims["h"], "all": event.payload, "at": event.occurred_at, "n": event.payload.tags.size()}`,
		`{"missing": event.payload.colour}`,
		`{"deep": event.payload.name.first}`,
		`{"bad": event.payload.name * 2.0}`,
		`{"has": has(event.payload.colour), "tags": event.payload.tags.map(t, t.upperAscii()), "opt": event.payload.?colour.orValue("none")}`,
	} {
		tr, err := Transform{Map: mapping}.compile()
		if err != nil {
			t.Fatal(err)
		}
		if tr.object == nil {
			t.Fatalf("%s: no object plan", mapping)
		}
		env, _ := celEnv()
		whole, err := compileExpr(env, "map", mapping, false)
		if err != nil {
			t.Fatal(err)
		}
		plain := transformer{values: whole.prg}
		r := transformRecord(transformPayload)
		fast, _, fastErr := tr.apply(nil, tr.newEvent(), r)
		slow, _, slowErr := plain.apply(nil, plain.newEvent(), transformRecord(transformPayload))
		if (fastErr == nil) != (slowErr == nil) {
			t.Fatalf("%s: plan error %v, CEL error %v", mapping, fastErr, slowErr)
		}
		if fastErr != nil {
			if !sink.IsPermanent(fastErr) || !errors.Is(fastErr, ErrTransform) {
				t.Fatalf("%s: error %v is not a permanent ErrTransform", mapping, fastErr)
			}
			continue
		}
		var a, b any
		if err := json.Unmarshal(fast, &a); err != nil {
			t.Fatalf("%s: plan wrote %s: %v", mapping, fast, err)
		}
		_ = json.Unmarshal(slow, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: plan wrote %s, CEL %s", mapping, fast, slow)
		}
	}
}

func TestTransformErrorsArePermanentWithCELsMessage(t *testing.T) {
	t.Parallel()
	big := `{"tags":[` + strings.TrimSuffix(strings.Repeat(`"t",`, 2000), ",") + `]}`
	for _, tc := range []struct {
		name, filter, mapping, payload, want string
	}{
		{name: "missing key", mapping: `{"price": event.payload.price}`, payload: `{"name":"x"}`, want: "no such key: price"},
		{name: "wrong type", mapping: `{"cents": event.payload.price * 100.0}`, payload: `{"price":"12.99"}`, want: "no such overload"},
		{name: "filter not bool at run time", filter: `event.payload.flag`, payload: `{"flag":"yes"}`, want: "want a bool"},
		// A transform with both says which failed.
		{name: "filter fails, with a map", filter: `event.payload.price > 0`, mapping: `{"c": int(event.payload.price * 100.0)}`,
			payload: `{"price":"x"}`, want: "the partner's filter failed on the event: no such overload"},
		{name: "filter not bool, with a map", filter: `event.payload.flag`, mapping: `{"c": event.payload.n * 2.0}`,
			payload: `{"flag":"yes","n":1}`, want: "the partner's filter failed on the event: gave string, want a bool"},
		{name: "map fails after the filter", filter: `event.op == "upsert"`, mapping: `{"c": int(event.payload.price * 100.0)}`,
			payload: `{"price":"x"}`, want: "the partner's map failed on the event: no such overload"},
		{name: "no JSON for NaN", mapping: `{"x": 0.0 / 0.0}`, payload: `{}`, want: "has no JSON"},
		{name: "non-string key", mapping: `{1: "a"}`, payload: `{}`, want: "keys must be strings"},
		{name: "too costly", mapping: `event.payload.tags.map(a, event.payload.tags.map(b, a + b)).size()`, payload: big, want: "cost limit exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := Transform{Filter: tc.filter, Map: tc.mapping}.compile()
			if err != nil {
				t.Fatal(err)
			}
			got, keep, err := tr.apply([]byte("x"), tr.newEvent(), transformRecord(tc.payload))
			if !sink.IsPermanent(err) || !errors.Is(err, ErrTransform) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("apply error = %v; want a permanent ErrTransform saying %q", err, tc.want)
			}
			if keep || string(got) != "x" {
				t.Fatalf("apply = %q, keep %v; want the buffer unchanged", got, keep)
			}
		})
	}
}
