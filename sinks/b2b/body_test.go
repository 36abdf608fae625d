package b2b

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

func TestEncodeEvent(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.FixedZone("x", 3600))
	for _, id := range []string{"sku-1", `quo"te`, `back\slash`, "tab\there", "ünï", "<b>&", "\u2028", "\x7f"} {
		for _, payload := range []json.RawMessage{nil, json.RawMessage(`{"a": [1, 2],
 "b": "c"}`)} {
			r := sink.Record{Seq: 1 << 40, Event: events.Event{Tenant: "acme", ProductID: id, Version: 1<<62 + 1, Op: events.OpUpsert, OccurredAt: at, Payload: payload}}
			got, err := appendEvent(nil, &r)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(BodyEvent{Seq: r.Seq, ProductID: id, Version: r.Event.Version, Op: r.Event.Op, OccurredAt: at, Payload: payload})
			var g, w BodyEvent
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%q: %s does not decode: %v", id, got, err)
			}
			_ = json.Unmarshal(want, &w)
			g.Payload, w.Payload = compact(g.Payload), compact(w.Payload)
			if !reflect.DeepEqual(g, w) || !g.OccurredAt.Equal(at) {
				t.Errorf("%q: encodeEvent = %s, json.Marshal = %s", id, got, want)
			}
		}
	}
	bad := sink.Record{Event: events.Event{ProductID: "x", Payload: json.RawMessage(`{"a":`)}}
	if got, err := appendEvent([]byte("x"), &bad); err == nil || string(got) != "x" {
		t.Errorf("invalid payload: appendEvent = %q, %v; want the buffer unchanged and an error", got, err)
	}
}

func compact(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	var v any
	_ = json.Unmarshal(b, &v)
	out, _ := json.Marshal(v)
	return out
}
