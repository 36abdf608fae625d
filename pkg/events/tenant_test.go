package events

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

func TestValidateTenant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id      string
		wantErr string // "" = valid
	}{
		{"a", ""},
		{"0", ""},
		{"acme", ""},
		{"acme-eu_2", ""},
		{"9lives", ""},
		{"a-", ""},
		{strings.Repeat("a", 63), ""},
		{"", `invalid tenant id "": is empty`},
		{"a.b", `invalid tenant id "a.b": contains '.' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"*", `invalid tenant id "*": starts with '*'; it must start with a-z or 0-9`},
		{">", `invalid tenant id ">": starts with '>'; it must start with a-z or 0-9`},
		{"a*", `invalid tenant id "a*": contains '*' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"a>", `invalid tenant id "a>": contains '>' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"A", `invalid tenant id "A": starts with 'A'; it must start with a-z or 0-9`},
		{"aB", `invalid tenant id "aB": contains 'B' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"a b", `invalid tenant id "a b": contains ' ' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"-a", `invalid tenant id "-a": starts with '-'; it must start with a-z or 0-9`},
		{"_a", `invalid tenant id "_a": starts with '_'; it must start with a-z or 0-9`},
		{strings.Repeat("a", 64), `invalid tenant id "` + strings.Repeat("a", 64) + `": is 64 bytes, limit 63`},
		{"é", `invalid tenant id "é": starts with byte 0xc3 (non-ASCII); it must start with a-z or 0-9`},
		{"aé", `invalid tenant id "aé": contains byte 0xc3 (non-ASCII) at byte 1 (allowed: a-z 0-9 _ -)`},
		{"a\x00", `invalid tenant id "a\x00": contains '\x00' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"a\n", `invalid tenant id "a\n": contains '\n' at byte 1 (allowed: a-z 0-9 _ -)`},
		{"a\t", `invalid tenant id "a\t": contains '\t' at byte 1 (allowed: a-z 0-9 _ -)`},
		{strings.Repeat("x", 1000), `invalid tenant id "` + strings.Repeat("x", 64) + `"… (1000 bytes): is 1000 bytes, limit 63`},
	}
	for _, tt := range tests {
		err := ValidateTenant(tt.id)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateTenant(%q) = %v, want nil", tt.id, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ValidateTenant(%q) = nil, want %q", tt.id, tt.wantErr)
			continue
		}
		if err.Error() != tt.wantErr {
			t.Errorf("ValidateTenant(%q)\n got %q\nwant %q", tt.id, err, tt.wantErr)
		}
		if !errors.Is(err, ErrInvalidTenant) {
			t.Errorf("ValidateTenant(%q) = %v, not ErrInvalidTenant", tt.id, err)
		}
	}
}

func FuzzValidateTenant(f *testing.F) {
	for _, s := range []string{"", "a", "acme-eu_2", "a.b", "*", ">", "A", "a b", "-a", strings.Repeat("a", 63), strings.Repeat("a", 64), "é", "a\x00", "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateTenant(id)
		if match := TenantPattern.MatchString(id); (err == nil) != match {
			t.Fatalf("ValidateTenant(%q) = %v but the pattern match is %v", id, err, match)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidTenant) {
				t.Fatalf("error %v is not ErrInvalidTenant", err)
			}
			// The id is quoted from at most 64 of its bytes, each at most
			// 4 characters long when escaped, plus the reason.
			if len(err.Error()) > 64*4+150 {
				t.Fatalf("error message is %d bytes: %q", len(err.Error()), err)
			}
			return
		}
		if strings.ContainsAny(id, ".*>") || strings.ContainsFunc(id, unicode.IsSpace) {
			t.Fatalf("accepted %q, which is not one subject token", id)
		}
		subj, err := Subject(id, OpDelete)
		if err != nil {
			t.Fatal(err)
		}
		tenant, op, _, err := ParseSubject(subj)
		if err != nil || tenant != id || op != OpDelete {
			t.Fatalf("ParseSubject(%q) = %q, %q, %v", subj, tenant, op, err)
		}
	})
}

func TestSubject(t *testing.T) {
	t.Parallel()
	if s, err := Subject("acme", OpUpsert); err != nil || s != "products.acme.upsert" {
		t.Errorf("Subject(acme, upsert) = %q, %v", s, err)
	}
	if s, err := Subject("acme", OpDelete); err != nil || s != "products.acme.delete" {
		t.Errorf("Subject(acme, delete) = %q, %v", s, err)
	}
	if _, err := Subject("a.b", OpUpsert); !errors.Is(err, ErrInvalidTenant) {
		t.Errorf("Subject(a.b) error = %v, want ErrInvalidTenant", err)
	}
	if _, err := Subject("acme", "upsrt"); err == nil || err.Error() != `op "upsrt" is not one of upsert, delete` {
		t.Errorf("Subject(acme, upsrt) error = %v", err)
	}
	for _, l := range []Layout{{}, {Partitions: 8}} {
		pre := map[int]string{0: "products.", 8: "products.*."}[l.Partitions]
		if s, err := l.TenantSubjects("acme"); err != nil || s != pre+"acme.>" {
			t.Errorf("%+v.TenantSubjects(acme) = %q, %v", l, s, err)
		}
		for p, want := range map[Priority]string{"": "acme.*", PriorityNormal: "acme.*", PriorityHigh: "acme.*.high", PriorityBulk: "acme.*.bulk"} {
			if s, err := l.PrioritySubjects("acme", p); err != nil || s != pre+want {
				t.Errorf("%+v.PrioritySubjects(acme, %q) = %q, %v; want %q", l, p, s, err, pre+want)
			}
		}
		if _, err := l.TenantSubjects(">"); !errors.Is(err, ErrInvalidTenant) {
			t.Errorf("TenantSubjects(>) error = %v", err)
		}
	}
	if s, err := SubjectFor("acme", OpDelete, PriorityHigh); err != nil || s != "products.acme.delete.high" {
		t.Errorf("SubjectFor(acme, delete, high) = %q, %v", s, err)
	}
	if _, err := SubjectFor("acme", OpUpsert, "urgent"); err == nil {
		t.Error("SubjectFor(acme, upsert, urgent): no error")
	}
	for subj, want := range map[string]Priority{"products.acme.upsert": PriorityNormal, "products.acme.upsert.high": PriorityHigh, "products.acme.delete.bulk": PriorityBulk} {
		if _, _, p, err := ParseSubject(subj); err != nil || p != want {
			t.Errorf("ParseSubject(%q) priority %q, %v; want %q", subj, p, err, want)
		}
	}
	for _, bad := range []string{"products.acme.upsert.normal", "products.acme.upsert.urgent", "products.acme.upsert.high.x"} {
		if _, _, _, err := ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%q): no error", bad)
		}
	}
	for _, bad := range []string{"orders.acme.upsert", "products.acme", "products.A.upsert", "products.acme.upsert.x", "products.acme.put"} {
		if _, _, _, err := ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%q) = nil error", bad)
		}
	}
}
