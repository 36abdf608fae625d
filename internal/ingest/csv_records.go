package ingest

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
)

// csvRecords reads the records of a CSV stream with encoding/csv, one
// record at a time and none longer than max bytes. encoding/csv holds a
// whole record in memory, quoted fields that span lines included, so a
// recordSplitter finds where each record ends first and hands encoding/csv
// only records within the limit; a longer one is skipped unread.
type csvRecords struct {
	split recordSplitter
	feed  recordFeed
	cr    *csv.Reader
	line  int // first line of the record in feed
}

func newCSVRecords(r io.Reader, max int) *csvRecords {
	c := &csvRecords{split: recordSplitter{br: bufio.NewReaderSize(r, 64<<10), max: max, line: 1}}
	c.cr = csv.NewReader(&c.feed)
	c.cr.FieldsPerRecord = -1 // checked per row, so a short row is a row error, not the end
	c.cr.ReuseRecord = true
	return c
}

// Read returns the next record, valid until the next call, and the line it
// starts on. A record over the limit is an error that Is ErrRecordTooLong;
// one encoding/csv cannot parse is a *csv.ParseError. Reading goes on after
// both; any other error, io.EOF at the end, means the stream is done.
func (c *csvRecords) Read() ([]string, int, error) {
	for {
		rec, err := c.cr.Read()
		if !errors.Is(err, io.EOF) {
			return rec, c.line, err
		}
		// encoding/csv has used up the feed (or skipped an empty line):
		// give it the next record.
		b, line, err := c.split.next()
		if err != nil {
			return nil, line, err
		}
		c.feed.b, c.line = b, line
	}
}

// recordFeed is the reader encoding/csv reads from: the bytes of one
// record, then io.EOF until it is given the next.
type recordFeed struct{ b []byte }

func (f *recordFeed) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// splitState is where a recordSplitter is within a record.
type splitState uint8

const (
	atFieldStart splitState = iota
	inUnquoted
	inQuoted
	afterQuote // a quote inside a quoted field: it closes the field or, doubled, stands for one quote
	inBadLine  // a quoting error: encoding/csv drops the rest of the physical line
)

// recordSplitter cuts a CSV stream into records by encoding/csv's rules
// (Comma ',', no comments, strict quotes): a record ends at a newline
// outside a quoted field; a quoted field starts only at a field's start; a
// quote in an unquoted field, or a closing quote followed by anything but a
// comma or the line's end, is a parse error after which encoding/csv goes
// on at the next physical line. FuzzCSVRecords holds the two to the same
// records.
type recordSplitter struct {
	br   *bufio.Reader
	max  int
	buf  []byte
	line int // line the next record starts on
}

// next returns the next record's bytes, valid until the next call, with
// its newline, and the line it starts on. A record over max bytes is read
// to its end without being kept and reported as a *recordTooLongError.
func (s *recordSplitter) next() ([]byte, int, error) {
	s.buf = s.buf[:0]
	first, last, size, st := s.line, s.line, 0, atFieldStart
	for {
		chunk, err := s.br.ReadSlice('\n')
		if len(chunk) > 0 {
			last = s.line
		}
		size += len(chunk)
		if size <= s.max {
			s.buf = append(s.buf, chunk...)
		}
		ends := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if ends {
			chunk = chunk[:len(chunk)-1]
		}
		st = st.scan(chunk)
		if ends {
			s.line++
			if st != inQuoted {
				return s.record(first, last, size, false)
			}
			continue
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && size > 0:
			return s.record(first, last, size, st == inQuoted)
		case err != nil:
			return nil, first, err
		}
	}
}

func (s *recordSplitter) record(first, last, size int, unclosed bool) ([]byte, int, error) {
	if size > s.max {
		return nil, first, &recordTooLongError{first: first, last: last, max: s.max, unclosed: unclosed}
	}
	return s.buf, first, nil
}

// scan moves st over b, a piece of one physical line without its newline.
func (st splitState) scan(b []byte) splitState {
	for i := 0; i < len(b); i++ {
		switch st {
		case atFieldStart:
			switch b[i] {
			case '"':
				st = inQuoted
			case ',':
			default:
				st = inUnquoted
			}
		case inUnquoted:
			switch b[i] {
			case ',':
				st = atFieldStart
			case '"':
				st = inBadLine
			}
		case inQuoted:
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				return st
			}
			i += j
			st = afterQuote
		case afterQuote:
			switch b[i] {
			case '"':
				st = inQuoted
			case ',':
				st = atFieldStart
			default:
				st = inBadLine
			}
		case inBadLine:
			return st
		}
	}
	return st
}

// recordTooLongError is a CSV record over Config.MaxCSVRecordBytes.
type recordTooLongError struct {
	first, last, max int
	unclosed         bool
}

func (e *recordTooLongError) Error() string {
	lines := fmt.Sprintf("line %d", e.first)
	if e.last > e.first {
		lines = fmt.Sprintf("lines %d-%d", e.first, e.last)
	}
	msg := fmt.Sprintf("%v: the record on %s has more than %d bytes, the limit per CSV record", ErrRecordTooLong, lines, e.max)
	if e.unclosed {
		msg += "; a quoted field in it is not closed before the end of the file"
	}
	return msg
}

func (e *recordTooLongError) Is(target error) bool { return target == ErrRecordTooLong }
