package b2b

import (
	"testing"

	"github.com/tidwall/gjson"
)

// A payload object finds the keys the expressions name in one pass over
// its members: it must find what a lookup of each key with gjson finds.
func TestPayloadObjectFindsWhatGJSONFinds(t *testing.T) {
	t.Parallel()
	keys := []string{"name", "price", "a", "b", "c", "d", "e", "f", "g", "dup", "", "s", "u", "x", "missing"}
	for _, payload := range []string{
		`{"name":"Hammer","price":12.99,"stock":0}`,
		` { "a" : 1 , "b" : [ 1 , "]" , {"c":"}\"{"} ] , "c" : "x\"y\\" , "d":true,"e":null,"f":-1.5e3 , "g" : {"h":[{}]} } `,
		"{\n\t\"name\":\r\n\"tabs\"}",
		`{"na\u006de":"escaped key","name":"second"}`,
		`{"dup":1,"dup":2}`,
		`{"":"empty key","x":{"":1}}`,
		`{"s":"caf\u00e9 <b> & \ud83d\ude00","u":"日本"}`,
		`{}`,
	} {
		o := newEventValue(keys).obj
		o.reset(gjson.Parse(payload))
		plain := jsonObject{gjson.Parse(payload)}
		for _, k := range keys {
			got, found := o.find(k)
			want, wantFound := plain.find(k)
			if found != wantFound {
				t.Fatalf("%s: key %q found %v, gjson %v", payload, k, found, wantFound)
			}
			if !found {
				if raw := o.rawOf(k); raw != "" {
					t.Fatalf("%s: key %q has raw %q; want none", payload, k, raw)
				}
				continue
			}
			a, errA := appendValue(nil, got)
			b, errB := appendValue(nil, want)
			if string(a) != string(b) || errA != nil || errB != nil {
				t.Fatalf("%s: key %q gives %s (%v), gjson %s (%v)", payload, k, a, errA, b, errB)
			}
			direct, err := appendJSON(nil, o.rawOf(k))
			if string(direct) != string(a) || err != nil {
				t.Fatalf("%s: key %q written directly as %s (%v), as a value %s", payload, k, direct, err, a)
			}
		}
	}
}
