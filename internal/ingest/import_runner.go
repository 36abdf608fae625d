package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/fairwayhq/fairway/pkg/events"
)

// importRunner runs CSV imports in the background, ImportWorkers at a time.
type importRunner struct {
	s      *Server
	queue  chan ImportJob
	wg     sync.WaitGroup
	cancel context.CancelFunc
	mu     sync.Mutex
}

func newImportRunner(s *Server) *importRunner {
	return &importRunner{s: s, queue: make(chan ImportJob, 1024)}
}

func (r *importRunner) start(parent context.Context) error {
	if err := os.MkdirAll(r.s.cfg.SpoolDir, 0o700); err != nil {
		return fmt.Errorf("import spool dir: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	r.mu.Lock()
	r.cancel = cancel
	r.mu.Unlock()
	for range r.s.cfg.ImportWorkers {
		r.wg.Add(1)
		go r.work(ctx)
	}
	jobs, err := r.s.imports.unfinished(ctx, r.s.cfg.Node)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		r.s.log.Info("resuming import", "import", j.ID, "tenant", j.Tenant, "rows_done", j.RowsTotal)
		r.enqueue(j)
	}
	return nil
}

func (r *importRunner) enqueue(j ImportJob) {
	// The queue is large; when it is full the job stays queued in
	// PostgreSQL and is picked up on the next start of this node.
	select {
	case r.queue <- j:
	default:
		r.s.log.Warn("import queue full; job waits for a restart of this node", "import", j.ID)
	}
}

func (r *importRunner) stop(ctx context.Context) error {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop imports: %w", ctx.Err())
	}
}

func (r *importRunner) work(ctx context.Context) {
	defer r.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.queue:
			r.run(ctx, j)
		}
	}
}

// run processes one import. On shutdown it stops at a chunk boundary and
// leaves the job "running" so this node resumes it (skipping the rows
// already done) on its next start.
func (r *importRunner) run(ctx context.Context, j ImportJob) {
	s := r.s
	log := s.log.With("import", j.ID, "tenant", j.Tenant, "request_id", j.requestID)
	s.metrics.ImportsRunning.Inc()
	defer s.metrics.ImportsRunning.Dec()
	if err := s.imports.markRunning(ctx, j.ID); err != nil {
		log.Error("start import", "err", err)
		return
	}
	err := r.process(ctx, &j)
	if ctx.Err() != nil {
		log.Info("import paused by shutdown", "rows_done", j.RowsTotal)
		return
	}
	switch {
	case err != nil:
		j.Status, j.Failure = ImportFailed, err.Error()
	case j.RowsFailed > 0 && j.RowsOK == 0:
		j.Status, j.Failure = ImportFailed, "no row was accepted"
	case j.RowsFailed > 0:
		j.Status = ImportSucceededWithErrors
	default:
		j.Status = ImportSucceeded
	}
	if err := s.imports.finish(context.WithoutCancel(ctx), &j); err != nil {
		log.Error("finish import", "err", err)
		return
	}
	_ = os.Remove(j.spoolPath)
	log.Info("import finished", "status", j.Status, "rows", j.RowsTotal, "ok", j.RowsOK, "failed", j.RowsFailed, "duplicates", j.RowsDup)
}

func (r *importRunner) process(ctx context.Context, j *ImportJob) error {
	s := r.s
	f, err := os.Open(j.spoolPath)
	if err != nil {
		return fmt.Errorf("open spooled upload: %w", err)
	}
	defer f.Close()
	rows, err := newCSVRows(f, j.Tenant, s.cfg.Limits, s.cfg.MaxCSVRecordBytes, s.cfg.Clock)
	if err != nil {
		return err
	}
	skip := j.RowsTotal // rows whose outcome was recorded before a restart
	chunk := make([]events.Event, 0, s.cfg.ImportChunk)
	lines := make([]int, 0, s.cfg.ImportChunk)
	pctx := events.ContextWithRequestID(ctx, j.requestID)

	var pending int64  // rows read since the last flush, in file order
	var chunkBytes int // payload bytes in chunk
	// A round fits the tenant's quota bursts and waits for its tokens, so
	// an import slows down to the quota instead of failing.
	maxRows, maxBytes := s.quotas.chunkLimits(j.Tenant, s.cfg.ImportChunk, s.cfg.ImportChunkBytes)
	flush := func() error {
		if len(chunk) > 0 {
			if err := s.quotas.wait(ctx, j.Tenant, int64(len(chunk)), int64(chunkBytes)); err != nil {
				return err
			}
			cctx, span := s.startPublish(pctx, j.Tenant, len(chunk))
			res := s.deps.Publisher.Publish(cctx, chunk)
			endPublish(span, res)
			stored := 0
			for i, pr := range res {
				switch {
				case pr.Err != nil && errors.Is(pr.Err, events.ErrInvalidEvent):
					r.addError(j, lines[i], fmt.Sprintf("line %d: %v", lines[i], pr.Err))
					s.metrics.ImportRows.WithLabelValues("rejected").Inc()
				case pr.Err != nil:
					// JetStream did not take it: the import cannot go on
					// without losing rows, so it stops here. Progress up
					// to the last flush is kept; a re-upload is safe
					// because publishing is idempotent.
					return fmt.Errorf("line %d: publish: %w", lines[i], pr.Err)
				case pr.Duplicate:
					j.RowsOK++
					j.RowsDup++
					s.metrics.ImportRows.WithLabelValues("duplicate").Inc()
				default:
					j.RowsOK++
					stored++
					s.metrics.ImportRows.WithLabelValues("accepted").Inc()
				}
			}
			s.quotas.stored(j.Tenant, stored)
			clear(chunk) // the payloads are garbage now
			chunk, lines, chunkBytes = chunk[:0], lines[:0], 0
		}
		j.RowsTotal += pending
		pending = 0
		maxRows, maxBytes = s.quotas.chunkLimits(j.Tenant, s.cfg.ImportChunk, s.cfg.ImportChunkBytes)
		return s.imports.progress(context.WithoutCancel(ctx), j)
	}

	var seen int64
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		row, err := rows.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ferr := flush(); ferr != nil {
				return ferr
			}
			return err
		}
		seen++
		if seen <= skip {
			continue
		}
		if row.Err == nil && len(chunk) > 0 && chunkBytes+len(row.Event.Payload) > maxBytes {
			// Flushed before this row counts as pending, so a resume
			// after this round reads the row again.
			if err := flush(); err != nil {
				return err
			}
		}
		pending++
		if row.Err != nil {
			r.addError(j, row.Line, fmt.Sprintf("line %d: %v", row.Line, row.Err))
			s.metrics.ImportRows.WithLabelValues("rejected").Inc()
			continue
		}
		chunk = append(chunk, row.Event)
		lines = append(lines, row.Line)
		chunkBytes += len(row.Event.Payload)
		if len(chunk) >= maxRows {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

func (r *importRunner) addError(j *ImportJob, line int, msg string) {
	j.RowsFailed++
	if len(j.Errors) < r.s.cfg.MaxRowErrors {
		j.Errors = append(j.Errors, RowError{Line: line, Error: msg})
	}
}
