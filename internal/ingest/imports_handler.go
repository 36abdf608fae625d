package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"

	"github.com/google/uuid"
)

// ImportAccepted is the body of a 202 answer to a CSV upload.
type ImportAccepted struct {
	ID     string       `json:"id"`
	Status ImportStatus `json:"status"`
	URL    string       `json:"url"`
	Bytes  int64        `json:"bytes"`
}

func (s *Server) handleCreateImport(w http.ResponseWriter, r *http.Request) {
	tenant, ok := pathTenant(w, r)
	if !ok {
		return
	}
	if _, ok := s.authorize(w, r, tenant); !ok {
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "text/csv" {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the catalog as text/csv")
		return
	}
	if r.ContentLength > s.cfg.MaxImportBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("upload exceeds %d bytes", s.cfg.MaxImportBytes))
		return
	}
	if _, err := s.deps.Tenants.EnsureTenant(r.Context(), tenant); err != nil {
		s.log.ErrorContext(r.Context(), "ensure tenant", "tenant", tenant, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "tenant registry unavailable; retry")
		return
	}
	// A large upload may take longer than the server's read and write
	// timeouts; it has as long as it keeps up the minimum rate, up to
	// UploadTimeout, and then its own time to be answered.
	id := uuid.NewString()
	path := filepath.Join(s.cfg.SpoolDir, id+".csv")
	n, err := spool(path, newUploadDeadline(w, http.MaxBytesReader(w, r.Body, s.cfg.MaxImportBytes), &s.cfg))
	_ = http.NewResponseController(w).SetWriteDeadline(s.cfg.Clock().Add(uploadAnswerTime))
	if err != nil {
		_ = os.Remove(path)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("upload exceeds %d bytes", s.cfg.MaxImportBytes))
			return
		}
		if errors.Is(err, ErrUploadTooSlow) {
			s.log.WarnContext(r.Context(), "upload cut", "tenant", tenant, "err", err, "request_id", requestID(r.Context()))
			writeError(w, http.StatusRequestTimeout, "upload_too_slow", err.Error())
			return
		}
		s.log.ErrorContext(r.Context(), "spool import", "tenant", tenant, "err", err, "request_id", requestID(r.Context()))
		writeError(w, http.StatusInternalServerError, "spool_failed", "could not store the upload; retry")
		return
	}
	job := ImportJob{ID: id, Tenant: tenant, Status: ImportQueued, Bytes: n, node: s.cfg.Node, spoolPath: path, requestID: requestID(r.Context())}
	if err := s.imports.create(r.Context(), job); err != nil {
		_ = os.Remove(path)
		s.log.ErrorContext(r.Context(), "create import", "tenant", tenant, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not record the import; retry")
		return
	}
	s.runner.enqueue(job)
	url := "/v1/imports/" + id
	w.Header().Set("Location", url)
	writeJSON(w, http.StatusAccepted, ImportAccepted{ID: id, Status: ImportQueued, URL: url, Bytes: n})
}

func spool(path string, r io.Reader) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func (s *Server) handleGetImport(w http.ResponseWriter, r *http.Request) {
	p, ok := s.authorize(w, r, "")
	if !ok {
		return
	}
	job, err := s.Import(r.Context(), r.PathValue("id"))
	if err == nil && !p.Admin && job.Tenant != p.Tenant {
		err = ErrImportNotFound
	}
	if errors.Is(err, ErrImportNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "import not found")
		return
	}
	if err != nil {
		s.log.ErrorContext(r.Context(), "get import", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "could not read the import; retry")
		return
	}
	writeJSON(w, http.StatusOK, job)
}

// Import returns an import job by id.
func (s *Server) Import(ctx context.Context, id string) (ImportJob, error) {
	if _, err := uuid.Parse(id); err != nil {
		return ImportJob{}, ErrImportNotFound
	}
	return s.imports.get(ctx, id)
}
