package b2b

import (
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"github.com/tidwall/gjson"
)

// A payload that is a JSON object is read in one pass, for the keys the
// expressions name: payloadKeys finds them when the expressions are
// compiled, payloadObject finds their values on the first lookup of an
// event. A typical mapping and filter read a handful of keys, several of
// them twice (event.payload.price in both); one scan and one conversion
// each cost less than a lookup per read.

// payloadKeysMax bounds the keys a payloadObject indexes; the others are
// looked up one by one.
const payloadKeysMax = 32

// payloadKeys returns the distinct keys k of event.payload.k,
// event.payload["k"], event.payload.?k and has(event.payload.k) in asts
// (nil ones skipped), at most payloadKeysMax.
func payloadKeys(asts ...*cel.Ast) []string {
	var keys []string
	add := func(k string) {
		if len(keys) < payloadKeysMax && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, a := range asts {
		if a == nil {
			continue
		}
		celast.PostOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
			switch e.Kind() {
			case celast.SelectKind:
				if sel := e.AsSelect(); isEventPayload(sel.Operand()) {
					add(sel.FieldName())
				}
			case celast.CallKind:
				call := e.AsCall()
				if fn := call.FunctionName(); (fn == operators.Index || fn == operators.OptIndex || fn == operators.OptSelect) &&
					len(call.Args()) == 2 && isEventPayload(call.Args()[0]) && call.Args()[1].Kind() == celast.LiteralKind {
					if k, ok := call.Args()[1].AsLiteral().(types.String); ok {
						add(string(k))
					}
				}
			}
		}))
	}
	return keys
}

// isEventPayload reports whether e is event.payload.
func isEventPayload(e celast.Expr) bool {
	if e.Kind() != celast.SelectKind || e.AsSelect().IsTestOnly() || e.AsSelect().FieldName() != "payload" {
		return false
	}
	op := e.AsSelect().Operand()
	return op.Kind() == celast.IdentKind && op.AsIdent() == "event"
}

// payloadObject is a payload that is a JSON object. The keys the
// expressions name (event.payload.name, has(event.payload.price), known
// when they are compiled) are found in one pass over the object, on the
// first lookup, instead of one scan each, and each is converted to a CEL
// value once however often it is read; other keys are looked up as
// jsonObject does.
type payloadObject struct {
	jsonObject
	keys    []string  // shared by the eventValues of a transformer; read only
	raw     []string  // raw[i] is the JSON of the value of keys[i]; "" when absent
	vals    []ref.Val // vals[i] is raw[i] as a CEL value once read; nil before
	indexed bool
}

var (
	_ traits.Mapper = (*payloadObject)(nil)
	_ keyFinder     = (*payloadObject)(nil)
)

func (o *payloadObject) reset(r gjson.Result) {
	o.r, o.indexed = r, false
}

// index finds the keys in one pass over the members of the object, up to
// the last one it needs; a key's value is its first member's, as with
// gjson.
func (o *payloadObject) index() {
	o.indexed = true
	clear(o.raw)
	clear(o.vals)
	left := len(o.keys)
	s := o.r.Raw
	for i := 1; left > 0; { // s[0] is '{'
		if i = jsonSkipSpace(s, i); i >= len(s) || s[i] != '"' {
			return // the closing brace
		}
		end := jsonStringEnd(s, i)
		key := s[i+1 : end-1]
		if strings.IndexByte(key, '\\') >= 0 {
			key = gjson.Parse(s[i:end]).Str
		}
		i = jsonSkipSpace(s, jsonSkipSpace(s, end)+1) // past the colon
		end = jsonValueEnd(s, i)
		if k := slices.Index(o.keys, key); k >= 0 && o.raw[k] == "" {
			o.raw[k] = s[i:end]
			left--
		}
		i = jsonSkipSpace(s, end) + 1 // past the comma or the closing brace
	}
}

func (o *payloadObject) find(k string) (ref.Val, bool) {
	i := slices.Index(o.keys, k)
	if i < 0 {
		return o.jsonObject.find(k)
	}
	if !o.indexed {
		o.index()
	}
	switch {
	case o.raw[i] == "":
		return nil, false
	case o.vals[i] == nil:
		o.vals[i] = jsonToVal(o.raw[i])
	}
	return o.vals[i], true
}

// rawOf returns the JSON of the value of key k; "" when there is none.
func (o *payloadObject) rawOf(k string) string {
	i := slices.Index(o.keys, k)
	if i < 0 {
		return o.jsonObject.lookup(k).Raw
	}
	if !o.indexed {
		o.index()
	}
	return o.raw[i]
}

func (o *payloadObject) FindStringKey(k string) (any, bool) { return o.find(k) }
func (o *payloadObject) Find(key ref.Val) (ref.Val, bool)   { return findKey(o, key) }
func (o *payloadObject) Get(key ref.Val) ref.Val            { return getKey(o, key) }
func (o *payloadObject) Contains(key ref.Val) ref.Val       { return containsKey(o, key) }

// Skipping over JSON text that is known to be valid (checkEvent checks
// every payload), to find the members of a payload object without
// decoding the values nobody reads.

// jsonSkipSpace returns the index of the first byte of s at or after i
// that is not JSON white space.
func jsonSkipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// jsonStringEnd returns the index just past the string that starts at
// s[i], a quote.
func jsonStringEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(s)
}

// jsonValueEnd returns the index just past the value that starts at s[i].
func jsonValueEnd(s string, i int) int {
	switch s[i] {
	case '"':
		return jsonStringEnd(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = jsonStringEnd(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(s)
	}
	for i < len(s) { // a number, true, false or null
		switch s[i] {
		case ',', '}', ']', ' ', '\n', '\r', '\t':
			return i
		}
		i++
	}
	return i
}
