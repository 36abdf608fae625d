package b2b

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// appendValue appends the JSON of the CEL value v, the result of a
// partner's map, to b: maps become objects with their keys sorted (so that
// the same event always has the same body), timestamps RFC 3339 strings,
// durations strings of seconds ("1.5s"), bytes base64, as CEL's own JSON
// conversion does; a payload object or array passed on untouched is
// copied as it is. Map keys must be strings; a NaN or infinite double, a
// type or an absent optional has no JSON and is an error.
func appendValue(b []byte, v ref.Val) ([]byte, error) {
	switch v := v.(type) {
	case types.String:
		return appendString(b, string(v)), nil
	case types.Int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case types.Uint:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case types.Double:
		return appendFloat(b, float64(v))
	case types.Bool:
		return strconv.AppendBool(b, bool(v)), nil
	case types.Null:
		return append(b, "null"...), nil
	case types.Timestamp:
		b = append(b, '"')
		b = v.Time.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	case types.Duration:
		return appendString(b, strconv.FormatFloat(v.Duration.Seconds(), 'f', -1, 64)+"s"), nil
	case types.Bytes:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"'), nil
	case jsonObject:
		return append(b, v.r.Raw...), nil
	case *payloadObject:
		return append(b, v.r.Raw...), nil
	case jsonArray:
		return append(b, v.r.Raw...), nil
	case *types.Optional:
		if !v.HasValue() {
			return b, fmt.Errorf("an absent optional value has no JSON")
		}
		return appendValue(b, v.GetValue())
	case *types.Err:
		return b, v
	case traits.Mapper:
		return appendObject(b, v)
	case traits.Lister:
		b = append(b, '[')
		n, _ := v.Size().(types.Int)
		for i := range int(n) {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, v.Get(types.Int(i))); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	}
	return b, fmt.Errorf("a value of type %s has no JSON", v.Type().TypeName())
}

// appendJSON appends to b what appendValue appends for jsonToVal(raw),
// without making the CEL value.
func appendJSON(b []byte, raw string) ([]byte, error) {
	switch raw[0] {
	case '"':
		return appendString(b, jsonString(raw)), nil
	case 't', 'f', 'n', '{', '[':
		return append(b, raw...), nil
	}
	return appendFloat(b, jsonNumber(raw))
}

func appendObject(b []byte, m traits.Mapper) ([]byte, error) {
	var keys []string
	if n, ok := m.Size().(types.Int); ok {
		keys = make([]string, 0, n)
	}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		s, ok := k.(types.String)
		if !ok {
			return b, fmt.Errorf("a map key of type %s has no JSON; keys must be strings", k.Type().TypeName())
		}
		keys = append(keys, string(s))
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, m.Get(types.String(k))); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// appendFloat writes f as encoding/json does.
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, fmt.Errorf("the double %v has no JSON", f)
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		out, _ := json.Marshal(f)
		return append(b, out...), nil
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64), nil
}
