package b2b

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	src    Transform
	filter *program // nil when not set
	// object, when set, writes a map that is an object literal (the usual
	// mapping).
	object *objectPlan
	// values gives what the map computes: its value when object is nil,
	// else the values of object's entries that are not selections; as a
	// list of them when listed. nil when there is nothing to compute.
	values *program
	listed bool
	// payloadKeys are the keys of the payload the expressions name
	// (event.payload.k), which payloadObject finds in one pass.
	payloadKeys []string
	// outputSize is the mean size of the JSON of an event through the
	// transform in the last run of encodeRun: a map usually writes much
	// less than the event, and the next run's buffer is sized by it.
	outputSize atomic.Int64
}

// outputSizeHint returns the bytes to reserve per event written through
// t; 0 when there is no transform or no run yet.
func (t *transformer) outputSizeHint() int {
	if t == nil {
		return 0
	}
	if n := int(t.outputSize.Load()); n > 0 {
		return n + n/4 + 16
	}
	return 0
}

// computed are the values a map computes: one, or a list of them.
type computed struct {
	one  ref.Val
	list traits.Lister
}

// at returns the j-th value.
func (c computed) at(j int) ref.Val {
	if c.list != nil {
		return c.list.Get(types.Int(j))
	}
	return c.one
}

// objectPlan evaluates a map literal with constant string keys: apply
// writes the object itself, in the order the keys are written, instead of
// having CEL build a map to be iterated and sorted; a value that is a
// plain field selection (event.product_id, event.payload.name) is read
// directly, as CEL's own selection would; the other values are the
// transformer's values, in order. Over a typical mapping that is a
// fraction of the cost of the map.
type objectPlan struct {
	// keys[i] is the JSON of the i-th key and its colon, after a comma
	// but for the first.
	keys []string
	// paths[i], when not nil, is the selection that is the value of
	// keys[i], after "event".
	paths [][]string
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
	var filter, mapped compiled
	if t.Filter != "" {
		if filter, err = compileExpr(env, "filter", t.Filter, true); err != nil {
			return nil, err
		}
		out.filter = filter.prg
	}
	if t.Map != "" {
		if mapped, err = compileExpr(env, "map", t.Map, false); err != nil {
			return nil, err
		}
		out.values = mapped.prg
		if plan, rest := planObject(env, t.Map); plan != nil {
			// The values the plan does not select, as one program; the
			// whole map when they do not compile on their own.
			var values compiled
			switch len(rest) {
			case 0:
			case 1:
				values, err = compileExpr(env, "map", rest[0], false)
			default:
				values, err = compileExpr(env, "map", "["+strings.Join(rest, ", ")+"]", false)
			}
			if err == nil {
				out.object, out.values, out.listed = plan, values.prg, len(rest) > 1
			}
		}
	}
	out.payloadKeys = payloadKeys(filter.ast, mapped.ast)
	return out, nil
}

// planObject returns the objectPlan of src when it is a map literal with
// distinct constant string keys and no optional entries, and the source
// of the values it does not select, in order; nil otherwise.
func planObject(env *cel.Env, src string) (*objectPlan, []string) {
	parsed, iss := env.Parse(src)
	if iss.Err() != nil {
		return nil, nil
	}
	root := parsed.NativeRep().Expr()
	if root.Kind() != celast.MapKind {
		return nil, nil
	}
	plan := &objectPlan{}
	var rest []string
	seen := map[string]bool{}
	for _, entry := range root.AsMap().Entries() {
		e := entry.AsMapEntry()
		if e.IsOptional() || e.Key().Kind() != celast.LiteralKind {
			return nil, nil
		}
		k, isString := e.Key().AsLiteral().(types.String)
		if !isString || seen[string(k)] {
			return nil, nil
		}
		seen[string(k)] = true
		sep := ","
		if len(plan.keys) == 0 {
			sep = ""
		}
		plan.keys = append(plan.keys, string(appendString([]byte(sep), string(k)))+":")
		path := eventPath(e.Value())
		plan.paths = append(plan.paths, path)
		if path == nil {
			v, err := cel.ExprToString(e.Value(), parsed.NativeRep().SourceInfo())
			if err != nil {
				return nil, nil
			}
			rest = append(rest, v)
		}
	}
	return plan, rest
}

// eventPath returns the fields of e when it is event.f1.f2… (no presence
// test, no index); nil otherwise.
func eventPath(e celast.Expr) []string {
	var path []string
	for e.Kind() == celast.SelectKind {
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return nil
		}
		path = append(path, sel.FieldName())
		e = sel.Operand()
	}
	if e.Kind() != celast.IdentKind || e.AsIdent() != "event" || len(path) == 0 {
		return nil
	}
	slices.Reverse(path)
	return path
}

// eval appends the object of plan for ev to b, taking the values it does
// not select from vals.
func (plan *objectPlan) eval(b []byte, ev *eventValue, vals computed) ([]byte, error) {
	b = append(b, '{')
	j := 0
	for i, k := range plan.keys {
		b = append(b, k...)
		var err error
		if path := plan.paths[i]; path != nil {
			b, err = ev.appendPath(b, path)
		} else {
			b, err = appendValue(b, vals.at(j))
			j++
		}
		if err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// selectPath is event.<path> as CEL selects it: a missing key is an error.
func selectPath(v ref.Val, path []string) ref.Val {
	for _, k := range path {
		if f, ok := v.(finder); ok {
			if found, ok := f.find(k); ok {
				v = found
				continue
			}
		}
		m, ok := v.(traits.Mapper)
		if !ok {
			return types.NewErr("no such key: %s", k)
		}
		if v = m.Get(types.String(k)); types.IsError(v) {
			return v
		}
	}
	return v
}

// compiled is a checked expression and its program.
type compiled struct {
	ast *cel.Ast
	prg *program
}

// program is a CEL program; tracked when CEL tracks its cost as it runs.
type program struct {
	cel.Program
	tracked bool
}

// eval evaluates p on the event ev is bound to, in ev's own frame, which
// saves taking one from CEL's pool and looking up its functions on every
// evaluation. A program whose cost CEL tracks gets a frame of its own:
// CEL keeps the tracker in the frame.
func (p *program) eval(ev *eventValue) (ref.Val, error) {
	var in any = ev.frame
	if p.tracked {
		in = ev
	}
	v, _, err := p.Eval(in)
	return v, err
}

func compileExpr(env *cel.Env, what, src string, boolean bool) (compiled, error) {
	if len(src) > TransformMaxLen {
		return compiled{}, fmt.Errorf("%w: %s is %d bytes, at most %d", ErrInvalidTransform, what, len(src), TransformMaxLen)
	}
	if strings.TrimSpace(src) == "" {
		return compiled{}, fmt.Errorf("%w: %s is blank", ErrInvalidTransform, what)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return compiled{}, fmt.Errorf("%w: %s: %s", ErrInvalidTransform, what, iss.Err())
	}
	if ot := ast.OutputType(); boolean && !ot.IsExactType(cel.BoolType) && !ot.IsExactType(cel.DynType) {
		return compiled{}, fmt.Errorf("%w: filter is of type %s, want bool", ErrInvalidTransform, ot)
	}
	// An expression whose cost CEL bounds within the limit before it runs
	// (selections, arithmetic, no walks over strings or lists of the event)
	// runs without tracking its cost, which would add about half to it;
	// the others are stopped at the limit as they run.
	c := compiled{ast: ast, prg: &program{}}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}
	if est, err := env.EstimateCost(ast, eventSizes{}); err != nil || est.Max > TransformCostLimit {
		opts = append(opts, cel.CostLimit(TransformCostLimit))
		c.prg.tracked = true
	}
	var err error
	if c.prg.Program, err = env.Program(ast, opts...); err != nil {
		return compiled{}, fmt.Errorf("%w: %s: %w", ErrInvalidTransform, what, err)
	}
	return c, nil
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

// newEvent returns the variable event of t's expressions, for one
// goroutine to apply t with, record after record.
func (t *transformer) newEvent() *eventValue { return newEventValue(t.payloadKeys) }

// apply appends to b the JSON the partner gets for r: its BodyEvent
// through the map, or as it is. keep is false when the filter drops r.
// r must have passed checkEvent; ev is from t.newEvent. On error b is
// returned unchanged and the error is a *sink.PermanentError wrapping
// ErrTransform.
func (t *transformer) apply(b []byte, ev *eventValue, r *sink.Record) (out []byte, keep bool, err error) {
	ev.bind(r)
	if t.filter != nil {
		v, err := t.filter.eval(ev)
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
	var vals computed
	if t.values != nil {
		v, err := t.values.eval(ev)
		if err == nil {
			vals, err = t.computedOf(v)
		}
		if err != nil {
			return b, false, transformError("map", err)
		}
	}
	start := len(b)
	switch {
	case t.object != nil:
		b, err = t.object.eval(b, ev, vals)
	case t.values != nil:
		b, err = appendValue(b, vals.at(0))
	default:
		return appendCheckedEvent(b, r), true, nil
	}
	if err != nil {
		return b[:start], false, transformError("map", err)
	}
	return b, true, nil
}

// computedOf returns the values v, a result of t.values, holds.
func (t *transformer) computedOf(v ref.Val) (computed, error) {
	if !t.listed {
		return computed{one: v}, nil
	}
	list, ok := v.(traits.Lister)
	if !ok {
		return computed{}, fmt.Errorf("gave %s, want a list", v.Type().TypeName())
	}
	return computed{list: list}, nil
}

func transformError(what string, err error) error {
	return sink.Permanent(fmt.Sprintf("the partner's %s failed on the event: %v", what, err), errors.Join(ErrTransform, err))
}
