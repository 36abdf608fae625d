package b2b

import (
	"encoding/json"
	"reflect"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
	"github.com/tidwall/gjson"

	"github.com/fairwayhq/fairway/internal/sink"
)

// The values a Transform's expressions see. The event is read from the
// record as it is, and its payload from its JSON bytes on demand: an
// expression that reads three fields of the payload looks up three keys
// (with gjson) instead of decoding the whole document, which would cost
// more than the rest of the sink's work per event. Anything other than a
// key or index lookup (iteration, equality, conversion) decodes the
// document into CEL's own values first.

const (
	celTrue  = types.True
	celFalse = types.False
)

// eventValue is the variable event: a CEL map of the fields of the
// record's BodyEvent. It is also the activation that binds it.
type eventValue struct {
	r       *sink.Record
	payload ref.Val // the payload once read; nil before
}

var (
	_ traits.Mapper          = (*eventValue)(nil)
	_ interpreter.Activation = (*eventValue)(nil)
)

func newEventValue(r *sink.Record) *eventValue { return &eventValue{r: r} }

// eventKeys are the fields of a BodyEvent, in its order.
var eventKeys = []string{"seq", "product_id", "version", "op", "occurred_at", "payload"}

func (e *eventValue) ResolveName(name string) (any, bool) {
	if name == "event" {
		return e, true
	}
	return nil, false
}

func (e *eventValue) Parent() interpreter.Activation { return nil }

func (e *eventValue) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), false
	}
	ev := &e.r.Event
	switch k {
	case "seq":
		return types.Int(e.r.Seq), true
	case "product_id":
		return types.String(ev.ProductID), true
	case "version":
		return types.Int(ev.Version), true
	case "op":
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
			e.payload = jsonToVal(gjson.Parse(unsafe.String(unsafe.SliceData(ev.Payload), len(ev.Payload))))
		}
		return e.payload, true
	}
	return nil, false
}

func (e *eventValue) Get(key ref.Val) ref.Val {
	if v, ok := e.Find(key); ok {
		return v
	} else if v != nil {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

func (e *eventValue) Contains(key ref.Val) ref.Val {
	v, ok := e.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

// native is the event as CEL's own map, for the rare operations that are
// not a lookup.
func (e *eventValue) native() ref.Val {
	m := make(map[string]ref.Val, len(eventKeys))
	for _, k := range eventKeys {
		if v, ok := e.Find(types.String(k)); ok {
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

// jsonToVal is the CEL value of one JSON value: objects and arrays stay
// JSON until something other than a lookup needs them.
func jsonToVal(r gjson.Result) ref.Val {
	switch r.Type {
	case gjson.String:
		return types.String(r.Str)
	case gjson.Number:
		return types.Double(r.Num)
	case gjson.True:
		return types.True
	case gjson.False:
		return types.False
	case gjson.Null:
		return types.NullValue
	}
	if r.IsArray() {
		return jsonArray{r}
	}
	return jsonObject{r}
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

var _ traits.Mapper = jsonObject{}

func (o jsonObject) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), false
	}
	var found gjson.Result
	if k == "" { // not a gjson path
		o.r.ForEach(func(name, value gjson.Result) bool {
			if name.Str == "" {
				found = value
				return false
			}
			return true
		})
	} else {
		found = o.r.Get(gjson.Escape(string(k)))
	}
	if !found.Exists() {
		return nil, false
	}
	return jsonToVal(found), true
}

func (o jsonObject) Get(key ref.Val) ref.Val {
	if v, ok := o.Find(key); ok {
		return v
	} else if v != nil {
		return v
	}
	return types.NewErr("no such key: %v", key)
}

func (o jsonObject) Contains(key ref.Val) ref.Val {
	v, ok := o.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

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
	return jsonToVal(found)
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
