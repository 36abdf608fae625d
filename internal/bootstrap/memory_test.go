package bootstrap_test

import (
	"testing"

	"github.com/fairwayhq/fairway/internal/bootstrap"
)

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "448MiB": 448 << 20, "1GiB": 1 << 30, "64 KiB": 64 << 10, "10B": 10, "2TiB": 2 << 40} {
		got, err := bootstrap.ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5GiB", "12MB", "lots", "9999999999TiB"} {
		if _, err := bootstrap.ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	b := bootstrap.Bytes(448 << 20)
	if s := b.String(); s != "448MiB" {
		t.Errorf("String() = %q, want 448MiB", s)
	}
}
