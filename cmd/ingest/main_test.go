package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/ingest"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://x@h/db", "NATS_URL": "nats://n:4222", "FAIRWAY_INGEST_LISTEN": ":9000"}
	c, err := parseConfig([]string{"--max-events", "50"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != env["DATABASE_URL"] || c.NATSURL != env["NATS_URL"] || c.Listen != ":9000" || c.Ingest.MaxEvents != 50 {
		t.Fatalf("config %+v", c)
	}
	if c.Ingest.MaxCSVRecordBytes != ingest.MaxCSVRecordBytesDefault || c.Ingest.UploadMinRate != ingest.UploadMinRateDefault ||
		c.Ingest.UploadGrace != ingest.UploadGraceDefault || c.Ingest.UploadTimeout != ingest.UploadTimeoutDefault {
		t.Fatalf("upload limits %+v, want the defaults", c.Ingest)
	}
	c, err = parseConfig([]string{"--max-csv-record", "4096", "--upload-min-rate", "1000", "--upload-grace", "5s", "--upload-timeout", "1h"},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingest.MaxCSVRecordBytes != 4096 || c.Ingest.UploadMinRate != 1000 || c.Ingest.UploadGrace != 5*time.Second || c.Ingest.UploadTimeout != time.Hour {
		t.Fatalf("upload limits %+v", c.Ingest)
	}
	if _, err := parseConfig(nil, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Fatalf("missing DATABASE_URL: %v", err)
	}
}
