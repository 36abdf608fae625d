package events

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)

func validEvent() Event {
	return Event{
		Tenant:     "acme",
		ProductID:  "sku-1",
		Version:    3,
		Op:         OpUpsert,
		OccurredAt: t0,
		Payload:    json.RawMessage(`{"name":"Widget","price":9.5}`),
	}
}

func nested(depth int) json.RawMessage {
	return json.RawMessage(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mod     func(*Event)
		limits  Limits
		field   string
		wantMsg string // exact message; "" means valid
		is      error  // extra sentinel the error must match
	}{
		{name: "valid upsert", mod: func(*Event) {}},
		{name: "valid delete without payload", mod: func(e *Event) { e.Op, e.Payload = OpDelete, nil }},
		{name: "valid delete with payload", mod: func(e *Event) { e.Op = OpDelete }},
		{name: "valid key", mod: func(e *Event) { e.IdempotencyKey = "req-7/line-3" }},
		{name: "valid unicode product id", mod: func(e *Event) { e.ProductID = "Größe-42 ✓" }},
		{name: "payload depth at limit", mod: func(e *Event) { e.Payload = nested(MaxPayloadDepth) }},
		{name: "payload at size limit", limits: Limits{MaxPayloadBytes: 30}, mod: func(e *Event) { e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", 22) + `"}`) }},

		{name: "tenant missing", mod: func(e *Event) { e.Tenant = "" }, field: "tenant", wantMsg: "tenant is required"},
		{name: "tenant bad", mod: func(e *Event) { e.Tenant = "a.b" }, field: "tenant", wantMsg: `tenant "a.b" contains '.' at byte 1 (allowed: a-z 0-9 _ -)`, is: ErrInvalidTenant},
		{name: "product id missing", mod: func(e *Event) { e.ProductID = "" }, field: "product_id", wantMsg: "product_id is required"},
		{name: "product id control", mod: func(e *Event) { e.ProductID = "a\nb" }, field: "product_id", wantMsg: `product_id "a\nb" contains control character U+000A at byte 1`},
		{name: "product id NUL", mod: func(e *Event) { e.ProductID = "a\x00" }, field: "product_id", wantMsg: `product_id "a\x00" contains control character U+0000 at byte 1`},
		{name: "product id DEL", mod: func(e *Event) { e.ProductID = "a\x7f" }, field: "product_id", wantMsg: `product_id "a\x7f" contains control character U+007F at byte 1`},
		{name: "product id bad utf8", mod: func(e *Event) { e.ProductID = "a\xff" }, field: "product_id", wantMsg: `product_id "a\xff" is not valid UTF-8 (byte 1)`},
		{name: "product id too long", mod: func(e *Event) { e.ProductID = strings.Repeat("p", 257) }, field: "product_id", wantMsg: "product_id is 257 bytes, limit 256"},
		{name: "product id custom limit", limits: Limits{MaxProductIDBytes: 4}, mod: func(e *Event) { e.ProductID = "12345" }, field: "product_id", wantMsg: "product_id is 5 bytes, limit 4"},
		{name: "version missing", mod: func(e *Event) { e.Version = 0 }, field: "version", wantMsg: "version is required"},
		{name: "version negative", mod: func(e *Event) { e.Version = -3 }, field: "version", wantMsg: "version must be >= 1, got -3"},
		{name: "op missing", mod: func(e *Event) { e.Op = "" }, field: "op", wantMsg: "op is required"},
		{name: "op unknown", mod: func(e *Event) { e.Op = "upsrt" }, field: "op", wantMsg: `op "upsrt" is not one of upsert, delete`},
		{name: "op case", mod: func(e *Event) { e.Op = "UPSERT" }, field: "op", wantMsg: `op "UPSERT" is not one of upsert, delete`},
		{name: "occurred_at missing", mod: func(e *Event) { e.OccurredAt = time.Time{} }, field: "occurred_at", wantMsg: "occurred_at is required"},
		{name: "occurred_at year", mod: func(e *Event) { e.OccurredAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, field: "occurred_at", wantMsg: "occurred_at year 10000 (in UTC) is outside 1..9999"},
		{name: "occurred_at year 0 in UTC", mod: func(e *Event) { e.OccurredAt = time.Date(1, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600)) }, field: "occurred_at", wantMsg: "occurred_at year 0 (in UTC) is outside 1..9999"},
		{name: "payload missing on upsert", mod: func(e *Event) { e.Payload = nil }, field: "payload", wantMsg: "payload is required for upsert"},
		{name: "payload array", mod: func(e *Event) { e.Payload = json.RawMessage(`[1]`) }, field: "payload", wantMsg: "payload must be a JSON object, got array"},
		{name: "payload string", mod: func(e *Event) { e.Payload = json.RawMessage(`"x"`) }, field: "payload", wantMsg: "payload must be a JSON object, got string"},
		{name: "payload null", mod: func(e *Event) { e.Payload = json.RawMessage(`null`) }, field: "payload", wantMsg: "payload must be a JSON object, got null"},
		{name: "payload null on delete", mod: func(e *Event) { e.Op, e.Payload = OpDelete, json.RawMessage(` null`) }, field: "payload", wantMsg: "payload must be a JSON object, got null"},
		{name: "payload number", mod: func(e *Event) { e.Payload = json.RawMessage(`12`) }, field: "payload", wantMsg: "payload must be a JSON object, got number"},
		{name: "payload empty", mod: func(e *Event) { e.Payload = json.RawMessage(` `) }, field: "payload", wantMsg: "payload is empty; it must be a JSON object"},
		{name: "payload invalid", mod: func(e *Event) { e.Payload = json.RawMessage(`{"a":}`) }, field: "payload", wantMsg: "payload is not valid JSON at byte 5: invalid character '}' looking for beginning of value", is: ErrMalformedJSON},
		{name: "payload too big", mod: func(e *Event) { e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", 300000-8) + `"}`) }, field: "payload", wantMsg: "payload is 300000 bytes, limit 262144"},
		{name: "payload too deep", mod: func(e *Event) { e.Payload = nested(MaxPayloadDepth + 1) }, field: "payload", wantMsg: "payload nests deeper than 64 levels (at byte 68)"},
		{name: "payload huge number", mod: func(e *Event) { e.Payload = json.RawMessage(`{"n":` + strings.Repeat("9", 101) + `}`) }, field: "payload", wantMsg: "payload has a 101-byte number at byte 5, limit 100"},
		{name: "payload brackets in strings do not nest", mod: func(e *Event) { e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("[", 100) + `\"["}`) }},
		{name: "key too long", mod: func(e *Event) { e.IdempotencyKey = strings.Repeat("k", 513) }, field: "idempotency_key", wantMsg: "idempotency_key is 513 bytes, limit 512"},
		{name: "key control", mod: func(e *Event) { e.IdempotencyKey = "k\r\nX: y" }, field: "idempotency_key", wantMsg: `idempotency_key "k\r\nX: y" contains control character U+000D at byte 1`},
		{name: "first problem wins", mod: func(e *Event) { e.Version, e.Op = 0, "x" }, field: "version", wantMsg: "version is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := validEvent()
			tt.mod(&e)
			err := e.Validate(tt.limits)
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.wantMsg)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("Validate() = %q\n                 want %q", err, tt.wantMsg)
			}
			if !errors.Is(err, ErrInvalidEvent) {
				t.Errorf("error %v is not ErrInvalidEvent", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field {
				t.Errorf("error %#v: want *ValidationError with Field %q", err, tt.field)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	e := validEvent()
	if got, want := e.Key(), "acme:sku-1:3"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
	if got, want := e.MsgID(), "acme:sku-1:3"; got != want {
		t.Errorf("MsgID() = %q, want %q", got, want)
	}
	e.IdempotencyKey = "custom"
	if got := e.Key(); got != "custom" {
		t.Errorf("Key() with IdempotencyKey = %q, want custom", got)
	}
	if got, want := e.MsgID(), "acme/custom"; got != want {
		t.Errorf("MsgID() with IdempotencyKey = %q, want %q", got, want)
	}
	// Another tenant choosing acme's default key gets an id of its own.
	other := validEvent()
	other.Tenant, other.IdempotencyKey = "globex", "acme:sku-1:3"
	if other.MsgID() == validEvent().MsgID() {
		t.Errorf("globex's key %q has acme's MsgID %q", other.IdempotencyKey, other.MsgID())
	}
}

func TestCheckSubject(t *testing.T) {
	t.Parallel()
	e := validEvent() // acme, upsert
	for subject, want := range map[string]MismatchRule{
		"products.acme.upsert":   "",
		"products.globex.upsert": MismatchTenant,
		"products.acme.delete":   MismatchOp,
		"products.acme.bogus":    MismatchOp,
		"products.acme":          MismatchOp,
	} {
		err := e.CheckSubject(subject)
		var me *SubjectMismatchError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", subject, err)
		case want != "" && (!errors.As(err, &me) || me.Rule != want || !errors.Is(err, ErrSubjectMismatch)):
			t.Errorf("%s: %v, want a %s", subject, err, want)
		}
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	t.Parallel()
	got := Limits{MaxKeyBytes: 7}.WithDefaults()
	want := Limits{MaxPayloadBytes: 256 << 10, MaxProductIDBytes: 256, MaxKeyBytes: 7}
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
}

func TestMsgAndDecode(t *testing.T) {
	t.Parallel()
	e := validEvent()
	e.ProductID = "sku \"1\" <é>\u2028"
	e.IdempotencyKey = "k1"
	e.OccurredAt = time.Date(2024, 5, 1, 14, 0, 0, 5, time.FixedZone("CEST", 2*3600))
	m, err := e.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "products.acme.upsert" {
		t.Errorf("subject = %q", m.Subject)
	}
	if got := m.Header.Get(HeaderMsgID); got != "acme/k1" {
		t.Errorf("header %s = %q, want acme/k1 (the key scoped to the tenant)", HeaderMsgID, got)
	}
	if len(m.Header) != 1 {
		t.Errorf("headers %v: want only %s (every header costs publish throughput)", m.Header, HeaderMsgID)
	}
	if m.Header.Get(HeaderRequestID) != "" {
		t.Errorf("Msg() set %s", HeaderRequestID)
	}
	// The body is the JSON of the whole event, equal to what encoding/json
	// makes of the struct tags.
	type plain Event
	std, _ := json.Marshal(plain(e))
	var a, b map[string]any
	if err := json.Unmarshal(m.Data, &a); err != nil {
		t.Fatalf("body %s: %v", m.Data, err)
	}
	_ = json.Unmarshal(std, &b)
	b["occurred_at"] = "2024-05-01T12:00:00.000000005Z" // Msg writes UTC
	if !reflect.DeepEqual(a, b) {
		t.Errorf("body = %s\nwant  %s", m.Data, std)
	}
	got, err := Decode(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.OccurredAt.Equal(e.OccurredAt) {
		t.Errorf("occurred_at = %v, want %v", got.OccurredAt, e.OccurredAt)
	}
	got.OccurredAt = e.OccurredAt
	if !reflect.DeepEqual(got, e) {
		t.Errorf("Decode = %+v\nwant     %+v", got, e)
	}

	bad := e
	bad.Tenant = "A"
	if _, err := bad.Msg(); !errors.Is(err, ErrInvalidTenant) {
		t.Errorf("Msg() of tenant A: err = %v, want ErrInvalidTenant", err)
	}
}

func TestDecodeStored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data, wantErr string
	}{
		{name: "unknown fields ignored", data: `{"tenant":"t","product_id":"p","version":1,"op":"delete","occurred_at":"2024-01-01T00:00:00Z","new_field":[1]}`},
		{name: "big payload allowed", data: `{"tenant":"t","product_id":"p","version":1,"op":"upsert","occurred_at":"2024-01-01T00:00:00Z","payload":{"a":"` + strings.Repeat("x", 300000) + `"}}`},
		{name: "no tenant", data: `{"product_id":"p","version":1,"op":"delete","occurred_at":"2024-01-01T00:00:00Z"}`, wantErr: "tenant is required"},
		{name: "no occurred_at", data: `{"tenant":"t","product_id":"p","version":1,"op":"delete"}`, wantErr: "occurred_at is required"},
		{name: "not json", data: `{"tenant":`, wantErr: "stored event is not valid JSON at byte 10: unexpected end of JSON input"},
		{name: "not object", data: `[]`, wantErr: "an event must be a JSON object, got array"},
		{name: "bad payload", data: `{"tenant":"t","product_id":"p","version":1,"op":"upsert","occurred_at":"2024-01-01T00:00:00Z","payload":{"a":01}}`,
			wantErr: "stored event is not valid JSON at byte 110: invalid character '1' after object key:value pair"},
		{name: "payload not object", data: `{"tenant":"t","product_id":"p","version":1,"op":"upsert","occurred_at":"2024-01-01T00:00:00Z","payload":[1]}`,
			wantErr: "payload must be a JSON object, got array"},
		{name: "unknown op", data: `{"tenant":"t","product_id":"p","version":1,"op":"upsertx","occurred_at":"2024-01-01T00:00:00Z"}`, wantErr: `op "upsertx" is not one of upsert, delete`},
		{name: "escaped names and op", data: `{"tenan\u0074":"t","product_id":"p","version":1,"op":"\u0064elete","occurred_at":"2024-01-01T00:00:00Z"}`},
		{name: "escaped name twice", data: `{"tenant":"t","tenan\u0074":"u","product_id":"p","version":1,"op":"delete","occurred_at":"2024-01-01T00:00:00Z"}`, wantErr: "tenant appears more than once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode([]byte(tt.data))
			if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Errorf("Decode() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMarshalJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	type plain Event
	for _, s := range []string{"", "plain", "q\"b\\s", "<&>", "\x01\t\n\r", "é✓\u2028\u2029", "bad\xffutf8"} {
		e := validEvent()
		e.ProductID = s
		e.IdempotencyKey = s
		got, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(plain(e))
		if string(got) != string(want) {
			t.Errorf("product id %q:\n got %s\nwant %s", s, got, want)
		}
	}
}
