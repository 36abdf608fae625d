package ingest

import "errors"

var (
	// ErrImportNotFound is returned for an unknown import id, or one that
	// belongs to another tenant (the two are not told apart on purpose).
	ErrImportNotFound = errors.New("import not found")
	// ErrBadCSV marks a CSV import that cannot be read further (missing
	// required columns, a header over the record limit, a read error).
	ErrBadCSV = errors.New("bad csv")
	// ErrRecordTooLong marks a CSV record (a row, with any quoted fields
	// that span lines) longer than Config.MaxCSVRecordBytes. The import
	// reports it as a row error and goes on with the next record.
	ErrRecordTooLong = errors.New("record too long")
	// ErrUploadTooSlow marks a CSV upload that fell below
	// Config.UploadMinRate or outlasted Config.UploadTimeout.
	ErrUploadTooSlow = errors.New("upload too slow")
	// ErrQuotaWait marks an import that waited Config.UploadTimeout at
	// once for its tenant's quota (a backlog that did not drain, a rate
	// set near zero). Its progress up to there is kept.
	ErrQuotaWait = errors.New("quota wait too long")
)
