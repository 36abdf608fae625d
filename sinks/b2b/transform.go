package b2b

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"

	"github.com/fairwayhq/fairway/internal/sink"
)

// TransformCostLimit bounds the work of one evaluation of a partner's
// filter or map (CEL's cost units, about one per operation and per byte of
// a string or list it walks): an event that needs more is refused,
// permanently, instead of holding the partner's deliveries.
const TransformCostLimit = 1_000_000

// TransformMaxLen bounds the text of each expression.
const TransformMaxLen = 16 << 10

// Transform is a partner's filter and mapping of events: two expressions
// in CEL (the Common Expression Language, https://cel.dev) over the
// variable event, which holds the fields of a BodyEvent (seq, product_id,
// version, op, occurred_at as a timestamp, and payload when the event has
// one; JSON numbers in the payload are doubles, as CEL reads JSON).
//
// Filter, when set, is a bool: an event for which it is false is not
// sent, and counts as applied. Map, when set, is the JSON value sent in
// the event's place in Body.events (a map becomes an object with its keys
// sorted; timestamps and durations become strings, bytes base64). An
// event whose filter or map fails (a missing key, a wrong type, too
// costly) is refused permanently, with CEL's error, and the rest of the
// batch is delivered. The zero Transform sends every event as it is.
//
// Expressions are checked when they are set (Registry.SetTransform) and
// compiled once per change by each Sink.
type Transform struct {
	Filter string
	Map    string
}

// IsZero reports whether t sends every event as it is.
func (t Transform) IsZero() bool { return t.Filter == "" && t.Map == "" }

// Kind names what t does: "none", "filter", "map" or "filter+map".
func (t Transform) Kind() string {
	switch {
	case t.Filter != "" && t.Map != "":
		return "filter+map"
	case t.Filter != "":
		return "filter"
	case t.Map != "":
		return "map"
	}
	return "none"
}

// transformer is a compiled Transform.
type transformer struct {
	src            Transform
	filter, mapped cel.Program // nil when not set
	// object, when set, evaluates a map that is an object literal (the
	// usual mapping) instead of mapped.
	object *objectPlan
}

// objectPlan evaluates a map literal with constant string keys: apply
// writes the object itself, in the order the keys are written, instead of
// having CEL build a map to be iterated and sorted; a value that is a
// plain field selection (event.product_id, event.payload.name) is read
// directly, as CEL's own selection would; the other values are CEL's, as
// one list. Over a typical mapping that is a fraction of the cost of the
// map.
type objectPlan struct {
	keys []string
	// paths[i], when not nil, is the selection that is the value of
	// keys[i], after "event".
	paths [][]ref.Val
	// rest gives the other values, in order; nil when there are none.
	rest cel.Program
}

// source returns the Transform t was compiled from; zero for nil.
func (t *transformer) source() Transform {
	if t == nil {
		return Transform{}
	}
	return t.src
}

// celEnv is the environment every expression is checked in: the variable
// event, CEL's standard library, optional values, and the strings, math
// and encoders extensions. Built once; a cel.Env is safe for
// concurrent use.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.EnableMacroCallTracking(), // so that objectPlan can write a value holding a macro back as source
		ext.Strings(), ext.Math(), ext.Encoders(),
	)
})

// compile checks t and compiles it; nil for the zero Transform. Errors
// wrap ErrInvalidTransform and carry CEL's message.
func (t Transform) compile() (*transformer, error) {
	if t.IsZero() {
		return nil, nil
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("b2b: CEL environment: %w", err)
	}
	out := &transformer{src: t}
	if t.Filter != "" {
		if out.filter, err = compileExpr(env, "filter", t.Filter, true); err != nil {
			return nil, err
		}
	}
	if t.Map != "" {
		if out.mapped, err = compileExpr(env, "map", t.Map, false); err != nil {
			return nil, err
		}
		out.object = planObject(env, t.Map)
	}
	return out, nil
}

// planObject returns the objectPlan of src when it is a map literal with
// distinct constant string keys and no optional entries; nil otherwise.
func planObject(env *cel.Env, src string) *objectPlan {
	parsed, iss := env.Parse(src)
	if iss.Err() != nil {
		return nil
	}
	root := parsed.NativeRep().Expr()
	if root.Kind() != celast.MapKind {
		return nil
	}
	plan := &objectPlan{}
	var rest []string
	seen := map[string]bool{}
	for _, entry := range root.AsMap().Entries() {
		e := entry.AsMapEntry()
		if e.IsOptional() || e.Key().Kind() != celast.LiteralKind {
			return nil
		}
		k, isString := e.Key().AsLiteral().(types.String)
		if !isString || seen[string(k)] {
			return nil
		}
		seen[string(k)] = true
		plan.keys = append(plan.keys, string(k))
		path := eventPath(e.Value())
		plan.paths = append(plan.paths, path)
		if path == nil {
			v, err := cel.ExprToString(e.Value(), parsed.NativeRep().SourceInfo())
			if err != nil {
				return nil
			}
			rest = append(rest, v)
		}
	}
	if len(rest) > 0 {
		prg, err := compileExpr(env, "map", "["+strings.Join(rest, ", ")+"]", false)
		if err != nil {
			return nil
		}
		plan.rest = prg
	}
	return plan
}

// eventPath returns the fields of e when it is event.f1.f2… (no presence
// test, no index); nil otherwise.
func eventPath(e celast.Expr) []ref.Val {
	var path []ref.Val
	for e.Kind() == celast.SelectKind {
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return nil
		}
		path = append(path, types.String(sel.FieldName()))
		e = sel.Operand()
	}
	if e.Kind() != celast.IdentKind || e.AsIdent() != "event" || len(path) == 0 {
		return nil
	}
	slices.Reverse(path)
	return path
}

// eval appends the object of plan for ev to b.
func (plan *objectPlan) eval(b []byte, ev *eventValue) ([]byte, error) {
	var rest traits.Lister
	if plan.rest != nil {
		v, _, err := plan.rest.Eval(ev)
		if err != nil {
			return b, err
		}
		if rest, _ = v.(traits.Lister); rest == nil {
			return b, fmt.Errorf("gave %s, want a list", v.Type().TypeName())
		}
	}
	b = append(b, '{')
	j := 0
	for i, k := range plan.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var v ref.Val
		if path := plan.paths[i]; path != nil {
			v = selectPath(ev, path)
		} else {
			v = rest.Get(types.Int(j))
			j++
		}
		var err error
		if b, err = appendValue(b, v); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// selectPath is event.<path> as CEL selects it: a missing key is an error.
func selectPath(v ref.Val, path []ref.Val) ref.Val {
	for _, k := range path {
		m, ok := v.(traits.Mapper)
		if !ok {
			return types.NewErr("no such key: %s", k)
		}
		if v = m.Get(k); types.IsError(v) {
			return v
		}
	}
	return v
}

func compileExpr(env *cel.Env, what, src string, boolean bool) (cel.Program, error) {
	if len(src) > TransformMaxLen {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalidTransform, what, len(src), TransformMaxLen)
	}
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("%w: %s is blank", ErrInvalidTransform, what)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrInvalidTransform, what, iss.Err())
	}
	if ot := ast.OutputType(); boolean && !ot.IsExactType(cel.BoolType) && !ot.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("%w: filter is of type %s, want bool", ErrInvalidTransform, ot)
	}
	// An expression whose cost CEL bounds within the limit before it runs
	// (selections, arithmetic, no walks over strings or lists of the event)
	// runs without tracking its cost, which would add about half to it;
	// the others are stopped at the limit as they run.
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if est, err := env.EstimateCost(ast, eventSizes{}); err != nil || est.Max > TransformCostLimit {
		opts = append(opts, cel.CostLimit(TransformCostLimit))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidTransform, what, err)
	}
	return prg, nil
}

// eventSizes tells CEL's cost estimate how large the parts of event can
// be: at most a request's largest body.
type eventSizes struct{}

func (eventSizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func (eventSizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	if p := n.Path(); len(p) > 0 && p[0] == "event" {
		return &cost.SizeEstimate{Min: 0, Max: MaxRequestBytesMax}
	}
	return nil
}

// apply appends to b the JSON the partner gets for r: its BodyEvent
// through the map, or as it is. keep is false when the filter drops r.
// r must have passed checkEvent. On error b is returned unchanged and the
// error is a *sink.PermanentError wrapping ErrTransform.
func (t *transformer) apply(b []byte, r *sink.Record) (out []byte, keep bool, err error) {
	ev := newEventValue(r)
	if t.filter != nil {
		v, _, err := t.filter.Eval(ev)
		if err != nil {
			return b, false, transformError("filter", err)
		}
		switch v {
		case celTrue:
		case celFalse:
			return b, false, nil
		default:
			return b, false, transformError("filter", fmt.Errorf("gave %s, want a bool", v.Type().TypeName()))
		}
	}
	start := len(b)
	switch {
	case t.object != nil:
		b, err = t.object.eval(b, ev)
	case t.mapped != nil:
		var v ref.Val
		if v, _, err = t.mapped.Eval(ev); err == nil {
			b, err = appendValue(b, v)
		}
	default:
		return appendCheckedEvent(b, r), true, nil
	}
	if err != nil {
		return b[:start], false, transformError("map", err)
	}
	return b, true, nil
}

func transformError(what string, err error) error {
	return sink.Permanent(fmt.Sprintf("the partner's %s failed on the event: %v", what, err), errors.Join(ErrTransform, err))
}
