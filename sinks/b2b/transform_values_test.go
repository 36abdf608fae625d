package b2b

import (
	"testing"

	"cel.dev/cel-go/common/types"
	"github.com/tidwall/gjson"
)

// jsonToVal reads JSON text as gjson does, and appendJSON writes it as
// appendValue writes its value.
func TestJSONToValAgreesWithGJSONAndAppendJSONWithAppendValue(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`"plain"`, `"esc\"aped\\ \/ \n"`, `"\u00e9<&>"`, `"\ud83d\ude00"`, `""`,
		`0`, `-0`, `12.99`, `-1.5e3`, `1e21`, `1e-7`, `123456789012345678901234567890`, `1e400`,
		`true`, `false`, `null`, `{"a": 1}`, `[1, "2"]`, `[]`,
	} {
		v := jsonToVal(raw)
		r := gjson.Parse(raw)
		switch r.Type {
		case gjson.String:
			if v != types.String(r.Str) {
				t.Fatalf("%s: %v, gjson %q", raw, v, r.Str)
			}
		case gjson.Number:
			if v != types.Double(r.Num) {
				t.Fatalf("%s: %v, gjson %v", raw, v, r.Num)
			}
		}
		want, wantErr := appendValue(nil, v)
		got, err := appendJSON(nil, raw)
		if string(got) != string(want) || (err == nil) != (wantErr == nil) {
			t.Fatalf("%s: appendJSON %s (%v), appendValue %s (%v)", raw, got, err, want, wantErr)
		}
	}
}
