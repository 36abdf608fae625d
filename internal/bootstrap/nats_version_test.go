package bootstrap

import "testing"

func TestVersionAtLeast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"2.11.0", true}, {"2.15.2", true}, {"v2.11.1", true}, {"2.12.0-RC.1", true}, {"3.0.0", true},
		{"2.10.29", false}, {"2.9.10", false}, {"1.99.99", false}, {"", false}, {"2.11", false}, {"x.y.z", false},
	} {
		if got := versionAtLeast(tc.v, NATSVersionMin); got != tc.want {
			t.Errorf("versionAtLeast(%q, %s) = %v, want %v", tc.v, NATSVersionMin, got, tc.want)
		}
	}
}
