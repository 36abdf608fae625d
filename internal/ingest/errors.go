package ingest

import "errors"

var (
	// ErrImportNotFound is returned for an unknown import id, or one that
	// belongs to another tenant (the two are not told apart on purpose).
	ErrImportNotFound = errors.New("import not found")
	// ErrBadCSV marks a CSV import that cannot be read further (missing
	// required columns, a line over the limit, a read error).
	ErrBadCSV = errors.New("bad csv")
	// ErrLineTooLong is returned when one physical line of an upload
	// exceeds Config.MaxCSVLineBytes.
	ErrLineTooLong = errors.New("line too long")
)
