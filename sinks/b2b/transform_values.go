package b2b

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
	"github.com/tidwall/gjson"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// The values a Transform's expressions see. The event is read from the
// record as it is, and its payload from its JSON bytes on demand: an
// expression that reads three fields of the payload finds those three
// (payloadObject, in one pass) instead of decoding the whole document,
// which would cost more than the rest of the sink's work per event; a
// field is selected through FindStringKey, without boxing its name, and a
// map writes a selected field straight from its JSON (appendPath).
// Anything other than a key or index lookup (iteration, equality,
// conversion) decodes the document into CEL's own values first.

const (
	celTrue  = types.True
	celFalse = types.False
)

// eventValue is the variable event: a CEL map of the fields of the
// record's BodyEvent. It is also the activation that binds it. One
// eventValue serves one goroutine, bound to one record after another
// (bind), so that evaluating an event allocates only the values it reads.
type eventValue struct {
	r       *sink.Record
	payload ref.Val // the payload once read; nil before
	obj     payloadObject
	frame   *interpreter.ExecutionFrame // CEL's frame over e, see program.eval
}

var (
	_ traits.Mapper          = (*eventValue)(nil)
	_ interpreter.Activation = (*eventValue)(nil)
	_ keyFinder              = (*eventValue)(nil)
)

// keyFinder is a map of string keys that finds a key without boxing it.
// CEL's interpreter selects fields through FindStringKey when a map has
// it.
type keyFinder interface {
	FindStringKey(key string) (any, bool)
}

// finder is FindStringKey of the maps here, typed.
type finder interface {
	find(key string) (ref.Val, bool)
}

// newEventValue returns an eventValue whose payload object indexes keys
// (see payloadObject).
func newEventValue(keys []string) *eventValue {
	e := &eventValue{obj: payloadObject{keys: keys, raw: make([]string, len(keys)), vals: make([]ref.Val, len(keys))}}
	e.frame, _ = interpreter.NewExecutionFrame(e) // an error only for an input that is not an activation
	return e
}

// bind makes e the event of r.
func (e *eventValue) bind(r *sink.Record) *eventValue {
	e.r, e.payload = r, nil
	return e
}

// eventKeys are the fields of a BodyEvent, in its order.
var eventKeys = []string{"seq", "product_id", "version", "op", "occurred_at", "payload"}

// The values of event.op, boxed once.
var (
	celUpsert ref.Val = types.String(events.OpUpsert)
	celDelete ref.Val = types.String(events.OpDelete)
)

func (e *eventValue) ResolveName(name string) (any, bool) {
	if name == "event" {
		return e, true
	}
	return nil, false
}

func (e *eventValue) Parent() interpreter.Activation { return nil }

// find returns the field k of the event.
func (e *eventValue) find(k string) (ref.Val, bool) {
	ev := &e.r.Event
	switch k {
	case "seq":
		return types.Int(e.r.Seq), true
	case "product_id":
		return types.String(ev.ProductID), true
	case "version":
		return types.Int(ev.Version), true
	case "op":
		switch ev.Op {
		case events.OpUpsert:
			return celUpsert, true
		case events.OpDelete:
			return celDelete, true
		}
		return types.String(ev.Op), true
	case "occurred_at":
		return types.Timestamp{Time: ev.OccurredAt}, true
	case "payload":
		if len(ev.Payload) == 0 {
			return nil, false
		}
		if e.payload == nil {
			// The payload is read in place, without a copy: the record is
			// not changed while Apply runs, and no value read from it
			// outlives the evaluation (apply copies the result into the
			// request body).
			raw := unsafe.String(unsafe.SliceData(ev.Payload), len(ev.Payload))
			switch i := jsonSkipSpace(raw, 0); raw[i] {
			case '{':
				e.obj.reset(gjson.Parse(raw))
				e.payload = &e.obj
			case '[':
				// With the white space after it, which event.payload
				// passed on whole keeps, as gjson does.
				e.payload = jsonToVal(raw[i:])
			default:
				e.payload = jsonToVal(raw[i:jsonValueEnd(raw, i)])
			}
		}
		return e.payload, true
	}
	return nil, false
}

// appendPath appends the JSON of event.<path> to b, as
// appendValue(selectPath(e, path)) does, without making CEL values for
// the usual selections: a string or int field of the event, a key of the
// payload object.
func (e *eventValue) appendPath(b []byte, path []string) ([]byte, error) {
	switch {
	case len(path) == 1 && path[0] == "product_id":
		return appendString(b, e.r.Event.ProductID), nil
	case len(path) == 1 && path[0] == "version":
		return strconv.AppendInt(b, e.r.Event.Version, 10), nil
	case len(path) == 2 && path[0] == "payload":
		if p, _ := e.find("payload"); p == &e.obj {
			if raw := e.obj.rawOf(path[1]); raw != "" {
				return appendJSON(b, raw)
			}
		}
	}
	return appendValue(b, selectPath(e, path))
}

func (e *eventValue) FindStringKey(k string) (any, bool) { return e.find(k) }
func (e *eventValue) Find(key ref.Val) (ref.Val, bool)   { return findKey(e, key) }
func (e *eventValue) Get(key ref.Val) ref.Val            { return getKey(e, key) }
func (e *eventValue) Contains(key ref.Val) ref.Val       { return containsKey(e, key) }

// findKey is Mapper.Find of f: a key that is not a string is an error.
func findKey[F finder](f F, key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), false
	}
	return f.find(string(k))
}

// getKey is Mapper.Get of f: the value, or CEL's error for a missing key.
func getKey[F finder](f F, key ref.Val) ref.Val {
	v, found := findKey(f, key)
	if found || v != nil {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

// containsKey is Mapper.Contains of f.
func containsKey[F finder](f F, key ref.Val) ref.Val {
	v, found := findKey(f, key)
	if !found && v != nil {
		return v
	}
	return types.Bool(found)
}

// native is the event as CEL's own map, for the rare operations that are
// not a lookup.
func (e *eventValue) native() ref.Val {
	m := make(map[string]ref.Val, len(eventKeys))
	for _, k := range eventKeys {
		if v, ok := e.find(k); ok {
			m[k] = v
		}
	}
	return types.DefaultTypeAdapter.NativeToValue(m)
}

func (e *eventValue) Size() ref.Val {
	if len(e.r.Event.Payload) == 0 {
		return types.Int(len(eventKeys) - 1)
	}
	return types.Int(len(eventKeys))
}

func (e *eventValue) Iterator() traits.Iterator { return e.native().(traits.Iterable).Iterator() }
func (e *eventValue) ConvertToNative(t reflect.Type) (any, error) {
	return e.native().ConvertToNative(t)
}
func (e *eventValue) ConvertToType(t ref.Type) ref.Val { return e.native().ConvertToType(t) }
func (e *eventValue) Equal(other ref.Val) ref.Val      { return e.native().Equal(other) }
func (e *eventValue) Type() ref.Type                   { return types.MapType }
func (e *eventValue) Value() any                       { return e.native().Value() }

// jsonToVal is the CEL value of raw, the text of one valid JSON value:
// objects and arrays stay JSON until something other than a lookup needs
// them.
func jsonToVal(raw string) ref.Val {
	switch raw[0] {
	case '"':
		return types.String(jsonString(raw))
	case 't':
		return types.True
	case 'f':
		return types.False
	case 'n':
		return types.NullValue
	case '{':
		return jsonObject{gjson.Parse(raw)}
	case '[':
		return jsonArray{gjson.Parse(raw)}
	}
	return types.Double(jsonNumber(raw))
}

// jsonString is the text of raw, a JSON string.
func jsonString(raw string) string {
	if s := raw[1 : len(raw)-1]; strings.IndexByte(s, '\\') < 0 {
		return s
	}
	return gjson.Parse(raw).Str
}

// jsonNumber is the value of raw, a JSON number, as a double (±Inf when
// it is beyond a double's range).
func jsonNumber(raw string) float64 {
	f, _ := strconv.ParseFloat(raw, 64)
	return f
}

// decodeJSON decodes raw into CEL's own values (numbers as doubles).
func decodeJSON(raw string) ref.Val {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return types.WrapErr(err)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// jsonObject is a JSON object as a CEL map. A lookup scans the object
// for its key with gjson, which skips the other members without decoding
// them (indexing every member on the first lookup costs more, over the
// few keys a mapping reads).
type jsonObject struct{ r gjson.Result }

var (
	_ traits.Mapper = jsonObject{}
	_ keyFinder     = jsonObject{}
)

// lookup returns the JSON value of key k; not Exists when absent.
func (o jsonObject) lookup(k string) gjson.Result {
	if k == "" { // not a gjson path
		var found gjson.Result
		o.r.ForEach(func(name, value gjson.Result) bool {
			if name.Str == "" {
				found = value
				return false
			}
			return true
		})
		return found
	}
	return o.r.Get(gjson.Escape(k))
}

func (o jsonObject) find(k string) (ref.Val, bool) {
	if r := o.lookup(k); r.Exists() {
		return jsonToVal(r.Raw), true
	}
	return nil, false
}

func (o jsonObject) FindStringKey(k string) (any, bool) { return o.find(k) }
func (o jsonObject) Find(key ref.Val) (ref.Val, bool)   { return findKey(o, key) }
func (o jsonObject) Get(key ref.Val) ref.Val            { return getKey(o, key) }
func (o jsonObject) Contains(key ref.Val) ref.Val       { return containsKey(o, key) }

func (o jsonObject) Size() ref.Val {
	n := 0
	o.r.ForEach(func(_, _ gjson.Result) bool { n++; return true })
	return types.Int(n)
}

func (o jsonObject) native() ref.Val           { return decodeJSON(o.r.Raw) }
func (o jsonObject) Iterator() traits.Iterator { return iteratorOf(o.native()) }
func (o jsonObject) ConvertToNative(t reflect.Type) (any, error) {
	return o.native().ConvertToNative(t)
}
func (o jsonObject) ConvertToType(t ref.Type) ref.Val { return o.native().ConvertToType(t) }
func (o jsonObject) Equal(other ref.Val) ref.Val      { return o.native().Equal(other) }
func (o jsonObject) Type() ref.Type                   { return types.MapType }
func (o jsonObject) Value() any                       { return o.native().Value() }

// jsonArray is a JSON array as a CEL list.
type jsonArray struct{ r gjson.Result }

var _ traits.Lister = jsonArray{}

func (a jsonArray) Get(index ref.Val) ref.Val {
	i, err := types.GetOrError(index)
	if err != nil {
		return types.WrapErr(err)
	}
	n := 0
	var found gjson.Result
	a.r.ForEach(func(_, value gjson.Result) bool {
		if n == i {
			found = value
			return false
		}
		n++
		return true
	})
	if i < 0 || !found.Exists() {
		return types.NewErr("index out of range: %d", i)
	}
	return jsonToVal(found.Raw)
}

func (a jsonArray) Size() ref.Val {
	n := 0
	a.r.ForEach(func(_, _ gjson.Result) bool { n++; return true })
	return types.Int(n)
}

func (a jsonArray) native() ref.Val                             { return decodeJSON(a.r.Raw) }
func (a jsonArray) Add(other ref.Val) ref.Val                   { return a.native().(traits.Adder).Add(other) }
func (a jsonArray) Contains(v ref.Val) ref.Val                  { return a.native().(traits.Container).Contains(v) }
func (a jsonArray) Iterator() traits.Iterator                   { return iteratorOf(a.native()) }
func (a jsonArray) ConvertToNative(t reflect.Type) (any, error) { return a.native().ConvertToNative(t) }
func (a jsonArray) ConvertToType(t ref.Type) ref.Val            { return a.native().ConvertToType(t) }
func (a jsonArray) Equal(other ref.Val) ref.Val                 { return a.native().Equal(other) }
func (a jsonArray) Type() ref.Type                              { return types.ListType }
func (a jsonArray) Value() any                                  { return a.native().Value() }

// iteratorOf returns v's iterator, or one that yields v's error.
func iteratorOf(v ref.Val) traits.Iterator {
	if it, ok := v.(traits.Iterable); ok {
		return it.Iterator()
	}
	return errIterator{v}
}

// errIterator yields err once, so that a comprehension over a value that
// could not be decoded fails with its error.
type errIterator struct{ err ref.Val }

func (e errIterator) HasNext() ref.Val                          { return e.err }
func (e errIterator) Next() ref.Val                             { return e.err }
func (e errIterator) ConvertToNative(reflect.Type) (any, error) { return nil, e.err.(error) }
func (e errIterator) ConvertToType(ref.Type) ref.Val            { return e.err }
func (e errIterator) Equal(ref.Val) ref.Val                     { return e.err }
func (e errIterator) Type() ref.Type                            { return types.IteratorType }
func (e errIterator) Value() any                                { return e.err.Value() }
