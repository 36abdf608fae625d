package replay_test

import (
	"math"
	"testing"
)

// TestWindowRatios checks the pairing BenchmarkReplayImpact reports: each
// window with the replay against the mean of its neighbours without it.
func TestWindowRatios(t *testing.T) {
	for _, c := range []struct {
		name    string
		off, on []float64
		want    []float64
	}{
		{"both neighbours", []float64{10, 20, 10}, []float64{15, 30}, []float64{1, 2}},
		{"no window after the last", []float64{10, 20}, []float64{15, 40}, []float64{1, 2}},
		{"an empty window is left out", []float64{0, 10, 10}, []float64{5, 0}, []float64{0.5}},
		{"no windows", nil, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := windowRatios(c.off, c.on)
			if len(got) != len(c.want) {
				t.Fatalf("windowRatios(%v, %v) = %v, want %v", c.off, c.on, got, c.want)
			}
			for i := range got {
				if math.Abs(got[i]-c.want[i]) > 1e-9 {
					t.Fatalf("windowRatios(%v, %v) = %v, want %v", c.off, c.on, got, c.want)
				}
			}
		})
	}
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := append([]float64(nil), c.xs...)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Fatalf("median changed its input: %v → %v", in, c.xs)
			}
		}
	}
}
