package main

import (
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x", "FAIRWAY_DESTS": "postgres, b2b:acme"}
	c, err := parseConfig([]string{"--batch-size", "100", "--lease-ttl", "5s"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Dispatch.Dests) != 2 || c.Dispatch.Dests[1] != "b2b:acme" || c.Dispatch.BatchSize != 100 || c.LeaseTTL != 5*time.Second {
		t.Fatalf("config %+v", c)
	}
	if _, err := parseConfig(nil, func(string) string { return "" }); err == nil {
		t.Fatal("missing DATABASE_URL accepted")
	}
}
