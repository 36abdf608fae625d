package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

func TestPartnersTransformBatchDeliveriesCmd(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.NewPool(t)
	rcvSecret := b2b.GenerateSecret()
	rcv := b2btest.New(t, b2btest.Options{Secret: rcvSecret})
	env := map[string]string{"WHSEC": b2b.WebhookSecret(rcvSecret)}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		c := &cli{getenv: func(k string) string { return env[k] }, out: &out, errOut: &errOut}
		cmd := c.partnersCmd()
		cmd.SetArgs(append(args, "--database-url", dsn))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		err := cmd.ExecuteContext(context.Background())
		return out.String() + errOut.String(), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("partners %v: %v\n%s", args, err, out)
		}
		return out
	}
	mustRun("add", "acme", "erp", "--url", rcv.URL(), "--allow-insecure-http", "--secret-env", "WHSEC")

	// A bad expression is refused with CEL's error; nothing changes.
	if out, err := run("set-transform", "acme", "erp", "--map", `{"sku": event.product_id`); err == nil || !strings.Contains(err.Error(), "Syntax error") {
		t.Fatalf("set-transform with a bad map: %v\n%s", err, out)
	}
	if out := mustRun("list", "acme"); !strings.Contains(out, "TRANSFORM") || !strings.Contains(out, "none") {
		t.Fatalf("list after a refused transform:\n%s", out)
	}
	out := mustRun("set-transform", "acme", "erp", "--filter", `event.op == "upsert"`, "--map", `{"sku": event.product_id}`)
	if !strings.Contains(out, "acme b2b:erp transform: filter+map") {
		t.Fatalf("set-transform printed %q", out)
	}
	if out = mustRun("list", "acme"); !strings.Contains(out, "filter+map") {
		t.Fatalf("list after set-transform:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "map.cel")
	if err := os.WriteFile(file, []byte("{\n  \"sku\": event.product_id\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out = mustRun("set-transform", "acme", "erp", "--map-file", file); !strings.Contains(out, "transform: map") {
		t.Fatalf("set-transform --map-file printed %q", out)
	}
	if out = mustRun("set-transform", "acme", "erp", "--clear"); !strings.Contains(out, "transform: none") {
		t.Fatalf("set-transform --clear printed %q", out)
	}

	if out = mustRun("set-batch", "acme", "erp", "--max-events", "1"); !strings.Contains(out, "acme b2b:erp sends 1 event per request") {
		t.Fatalf("set-batch printed %q", out)
	}
	if out = mustRun("list", "acme"); !strings.Contains(out, "MAX EVENTS") {
		t.Fatalf("list after set-batch:\n%s", out)
	}
	if out = mustRun("set-rate", "acme", "erp", "--requests-per-sec", "20"); !strings.Contains(out, "acme b2b:erp takes at most 20 requests a second") {
		t.Fatalf("set-rate printed %q", out)
	}
	if out, err := run("set-rate", "acme", "erp", "--requests-per-sec", "-3"); err == nil {
		t.Fatalf("set-rate -3 accepted: %s", out)
	}

	var ue usageError
	for _, bad := range [][]string{
		{"set-transform", "acme", "erp"},
		{"set-rate", "acme", "erp"},
		{"set-transform", "acme", "erp", "--clear", "--map", "event"},
		{"set-transform", "acme", "erp", "--map", "event", "--map-file", file},
		{"set-transform", "acme", "erp", "--map-file", filepath.Join(t.TempDir(), "missing")},
		{"set-transform", "acme", "nope", "--map", "event"},
		{"set-batch", "acme", "erp"},
		{"set-batch", "acme", "erp", "--max-events", "-1"},
		{"deliveries", "acme", "nope"},
		{"deliveries", "acme", "erp", "--limit", "0"},
	} {
		if out, err := run(bad...); err == nil {
			t.Errorf("partners %v succeeded: %s", bad, out)
		}
	}
	if _, err := run("set-transform", "acme", "erp"); !errors.As(err, &ue) {
		t.Errorf("set-transform without expressions: %v; want a usage error", err)
	}

	if out = mustRun("deliveries", "acme", "erp"); !strings.Contains(out, "no requests to acme b2b:erp logged") {
		t.Fatalf("deliveries before any request printed %q", out)
	}
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b2b.New(&b2b.Config{Registry: reg, Partner: "erp"})
	if err != nil {
		t.Fatal(err)
	}
	recs := sinktest.Records(sinktest.Upsert("acme", "p1", 1), sinktest.Upsert("acme", "p2", 1))
	if errs, err := s.Apply(context.Background(), recs); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("Apply = %v, %v", errs, err)
	}
	rcv.FailNext(1, b2btest.Failure{Status: 503, Body: []byte("partner busy")})
	recs = sinktest.Records(sinktest.Upsert("acme", "p3", 1))
	recs[0].Seq = 3
	if _, err := s.Apply(context.Background(), recs); err == nil {
		t.Fatal("Apply against a 503 succeeded")
	}
	s.Close()
	out = mustRun("deliveries", "acme", "erp")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[1], "503") || !strings.Contains(lines[1], "partner busy") ||
		!strings.Contains(lines[2], "200") || !strings.Contains(lines[2], "fw1-") {
		t.Fatalf("deliveries printed\n%s\nwant a header, the 503 and two single-event 200s", out)
	}
	if out = mustRun("deliveries", "acme", "erp", "--limit", "1"); len(strings.Split(strings.TrimSpace(out), "\n")) != 2 {
		t.Fatalf("deliveries --limit 1 printed\n%s", out)
	}
}
