package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Defaults for Config.
const (
	MaxBodyBytesDefault      int64 = 16 << 20 // 16 MiB per events request
	MaxEventsDefault               = 10_000   // events per request
	MaxImportBytesDefault    int64 = 2 << 30  // 2 GiB per CSV upload
	MaxCSVRecordBytesDefault       = 1 << 20  // 1 MiB per CSV record
	UploadMinRateDefault     int64 = 64 << 10 // bytes/s a CSV upload must keep up after UploadGrace
	UploadGraceDefault             = 30 * time.Second
	UploadTimeoutDefault           = 30 * time.Minute
	ImportChunkDefault             = 500     // events published per round of an import
	ImportChunkBytesDefault        = 8 << 20 // payload bytes published per round of an import
	ImportWorkersDefault           = 2
	MaxRowErrorsDefault            = 100 // row errors kept per import
	ShutdownTimeoutDefault         = 30 * time.Second
	QuotaRefreshDefault            = time.Second
	BacklogTTLDefault              = time.Second
	BacklogRetryAfterDefault       = 5 * time.Second
)

// Config configures the ingest Server. Zero values take the defaults.
type Config struct {
	// Limits bound each event (payload size etc.). Default events.Limits{}.WithDefaults().
	Limits events.Limits
	// MaxBodyBytes bounds one events request body. Default 16 MiB.
	MaxBodyBytes int64
	// MaxEvents bounds the events in one request. Default 10,000.
	MaxEvents int
	// MaxImportBytes bounds one CSV upload. Default 2 GiB.
	MaxImportBytes int64
	// MaxCSVRecordBytes bounds one CSV record: a row with all its fields,
	// quoted fields that span lines included. An import holds a few times
	// this much per row; a longer record is a row error and the import
	// goes on. Default 1 MiB.
	MaxCSVRecordBytes int
	// UploadMinRate is the slowest average rate, in bytes per second, at
	// which a CSV upload may arrive: its body must be in by UploadGrace
	// plus one second per UploadMinRate bytes received, or it is cut with
	// 408. Default 64 KiB/s.
	UploadMinRate int64
	// UploadGrace is the time a CSV upload has before UploadMinRate
	// counts. Default 30s.
	UploadGrace time.Duration
	// UploadTimeout bounds the time to receive one CSV upload, however
	// fast it arrives, and the time an import waits at once for its
	// tenant's quota. Default 30m.
	UploadTimeout time.Duration
	// ImportChunk is how many rows an import publishes per round. Default 500.
	ImportChunk int
	// ImportChunkBytes bounds the payload bytes of one round: a round
	// goes out before a row would take it past this, so rows of large
	// payloads make smaller rounds. At least Limits.MaxPayloadBytes.
	// Default 8 MiB.
	ImportChunkBytes int
	// ImportWorkers is how many imports run at once on this node. Default 2.
	ImportWorkers int
	// MaxRowErrors is how many row errors an import keeps. Default 100.
	MaxRowErrors int
	// QuotaRefresh is how often tenants' quotas are reloaded from
	// PostgreSQL: a quota set with `fairway tenants set-quota` is in force
	// at every replica within this long. Default 1s.
	QuotaRefresh time.Duration
	// BacklogTTL is how long a tenant's counted backlog is used before it
	// is counted again (the max_backlog quota). Default 1s.
	BacklogTTL time.Duration
	// BacklogRetryAfter is the Retry-After of a refusal by the
	// max_backlog quota: a backlog drains at dispatch speed. Default 5s.
	BacklogRetryAfter time.Duration
	// SpoolDir holds uploaded CSV files until their import finishes.
	// Default $TMPDIR/fairway-imports.
	SpoolDir string
	// Node names this ingest instance; an instance resumes only its own
	// unfinished imports after a restart. Default: the host name.
	Node string
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time
}

// WithDefaults returns a copy with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Limits = c.Limits.WithDefaults()
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.MaxEvents = cmp.Or(c.MaxEvents, MaxEventsDefault)
	c.MaxImportBytes = cmp.Or(c.MaxImportBytes, MaxImportBytesDefault)
	c.MaxCSVRecordBytes = cmp.Or(c.MaxCSVRecordBytes, MaxCSVRecordBytesDefault)
	c.UploadMinRate = cmp.Or(c.UploadMinRate, UploadMinRateDefault)
	c.UploadGrace = cmp.Or(c.UploadGrace, UploadGraceDefault)
	c.UploadTimeout = cmp.Or(c.UploadTimeout, UploadTimeoutDefault)
	c.ImportChunk = cmp.Or(c.ImportChunk, ImportChunkDefault)
	c.ImportChunkBytes = cmp.Or(c.ImportChunkBytes, ImportChunkBytesDefault)
	c.ImportWorkers = cmp.Or(c.ImportWorkers, ImportWorkersDefault)
	c.MaxRowErrors = cmp.Or(c.MaxRowErrors, MaxRowErrorsDefault)
	c.QuotaRefresh = cmp.Or(c.QuotaRefresh, QuotaRefreshDefault)
	c.BacklogTTL = cmp.Or(c.BacklogTTL, BacklogTTLDefault)
	c.BacklogRetryAfter = cmp.Or(c.BacklogRetryAfter, BacklogRetryAfterDefault)
	c.SpoolDir = cmp.Or(c.SpoolDir, filepath.Join(os.TempDir(), "fairway-imports"))
	if c.Node == "" {
		h, err := os.Hostname()
		c.Node = cmp.Or(h, "ingest")
		_ = err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d is below 1 KiB", c.MaxBodyBytes))
	}
	if c.MaxEvents < 1 {
		errs = append(errs, fmt.Errorf("MaxEvents %d must be at least 1", c.MaxEvents))
	}
	if c.MaxCSVRecordBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxCSVRecordBytes %d is below 1 KiB", c.MaxCSVRecordBytes))
	}
	if c.UploadMinRate < 1 || c.UploadGrace < 0 || c.UploadTimeout < 0 {
		errs = append(errs, errors.New("UploadMinRate must be at least 1 byte/s; UploadGrace and UploadTimeout may not be negative"))
	}
	if c.QuotaRefresh <= 0 || c.BacklogTTL <= 0 || c.BacklogRetryAfter <= 0 {
		errs = append(errs, errors.New("QuotaRefresh, BacklogTTL and BacklogRetryAfter must be positive"))
	}
	if c.ImportChunk < 1 || c.ImportWorkers < 1 {
		errs = append(errs, errors.New("ImportChunk and ImportWorkers must be at least 1"))
	}
	if c.ImportChunkBytes < c.Limits.MaxPayloadBytes {
		errs = append(errs, fmt.Errorf("ImportChunkBytes %d is below the payload limit %d", c.ImportChunkBytes, c.Limits.MaxPayloadBytes))
	}
	if int64(c.Limits.MaxPayloadBytes) > c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("payload limit %d exceeds body limit %d", c.Limits.MaxPayloadBytes, c.MaxBodyBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("ingest config: %w", errors.Join(errs...))
	}
	return nil
}
