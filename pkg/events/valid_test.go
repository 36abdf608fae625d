package events

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases cover every rule of the grammar, each on both sides.
var validCases = []struct {
	in   string
	want bool
}{
	{``, false}, {` `, false}, {`{}`, true}, {` {} `, true}, {"\t\r\n[]\n", true},
	{`{`, false}, {`}`, false}, {`{"a"}`, false}, {`{"a":}`, false}, {`{"a":1,}`, false},
	{`{"a":1 "b":2}`, false}, {`{a:1}`, false}, {`{"a":1}{}`, false}, {`{"a" : [1, 2 ,3 ] }`, true},
	{`[`, false}, {`[1,]`, false}, {`[,1]`, false}, {`[1 2]`, false}, {`[[[]]]`, true}, {`[{}]`, true},
	{`true`, true}, {`tru`, false}, {`truex`, false}, {`false`, true}, {`null`, true}, {`nul`, false}, {`NULL`, false},
	{`0`, true}, {`-0`, true}, {`-`, false}, {`01`, false}, {`1.`, false}, {`.5`, false}, {`1.5`, true},
	{`1e5`, true}, {`1E+5`, true}, {`1e-5`, true}, {`1e`, false}, {`1e+`, false}, {`-1.25e10`, true},
	{`+1`, false}, {`0x10`, false}, {`1 2`, false}, {`[-]`, false}, {`[1e]`, false},
	{`""`, true}, {`"`, false}, {`"abc`, false}, {`"a\"b"`, true}, {`"a\\"`, true}, {`"\/\b\f\n\r\t"`, true},
	{`"\x"`, false}, {`"\u00e9"`, true}, {`"\u00E9"`, true}, {`"\u00g9"`, false}, {`"\u00e"`, false}, {`"\u`, false},
	{"\"a\tb\"", false}, {"\"a\x00b\"", false}, {"\"\xff\"", true}, {`"é"`, true},
	{`{"payload":{"n":[1,{"x":null}]},"v":-3}`, true},
	{strings.Repeat("[", 10000) + strings.Repeat("]", 10000), true},
	{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), false},
	{strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), true},
	{strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001), false},
}

func TestValid(t *testing.T) {
	for _, c := range validCases {
		if got := Valid([]byte(c.in)); got != c.want {
			t.Errorf("Valid(%.40q) = %v, want %v", c.in, got, c.want)
		}
		if std := json.Valid([]byte(c.in)); std != c.want {
			t.Errorf("case %.40q: encoding/json says %v: the case is wrong", c.in, std)
		}
	}
}

// FuzzValid holds Valid equal to encoding/json.Valid.
func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		if len(c.in) < 200 {
			f.Add([]byte(c.in))
		}
	}
	f.Add([]byte(`{"tenant":"acme","product_id":"p1","version":3,"op":"upsert","occurred_at":"2026-01-02T03:04:05Z","payload":{"a":[1,2.5e3,"x\u00e9"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json.Valid says %v", b, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	ev := []byte(`{"tenant":"t01","product_id":"p0001","version":7,"op":"upsert","occurred_at":"2026-11-25T01:02:03.456789Z","payload":{"name":"Espresso machine","price":{"amount":41900,"currency":"EUR"},"tags":["kitchen","coffee"],"stock":17}}`)
	b.Run("events.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			if !Valid(ev) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			if !json.Valid(ev) {
				b.Fatal("invalid")
			}
		}
	})
}

// BenchmarkDecodeStored is a sink decoding one stored event (Decode).
func BenchmarkDecodeStored(b *testing.B) {
	ev := []byte(`{"tenant":"t01","product_id":"p0001","version":7,"op":"upsert","occurred_at":"2026-11-25T01:02:03.456789Z","payload":{"name":"Espresso machine","price":{"amount":41900,"currency":"EUR"},"tags":["kitchen","coffee"],"stock":17}}`)
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(ev); err != nil {
			b.Fatal(err)
		}
	}
}
