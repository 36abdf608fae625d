package events

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"time"
)

// Format is the shape of an ingest request body.
type Format int

const (
	// FormatJSONArray is one JSON array of event objects.
	FormatJSONArray Format = iota
	// FormatNDJSON is one event object per line.
	FormatNDJSON
)

func (f Format) String() string {
	switch f {
	case FormatJSONArray:
		return "json-array"
	case FormatNDJSON:
		return "ndjson"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatFromContentType maps a Content-Type header to a Format:
// application/json → FormatJSONArray; application/x-ndjson,
// application/ndjson, application/jsonlines and application/jsonl →
// FormatNDJSON. Parameters are allowed, but a charset other than UTF-8 is
// not. Anything else is ErrUnsupportedContentType.
func FormatFromContentType(ct string) (Format, error) {
	if strings.TrimSpace(ct) == "" {
		return 0, fmt.Errorf("%w: missing Content-Type; use application/json or application/x-ndjson", ErrUnsupportedContentType)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrUnsupportedContentType, quote(ct), err)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return 0, fmt.Errorf("%w: charset %s; only utf-8 is accepted", ErrUnsupportedContentType, quote(cs))
	}
	switch mt {
	case "application/json":
		return FormatJSONArray, nil
	case "application/x-ndjson", "application/ndjson", "application/jsonlines", "application/jsonl":
		return FormatNDJSON, nil
	}
	return 0, fmt.Errorf("%w: %s; use application/json or application/x-ndjson", ErrUnsupportedContentType, quote(mt))
}

// MaxLineBytesSlack is added to Limits.MaxPayloadBytes for the default
// DecodeOptions.MaxLineBytes: room for the other fields of the event.
const MaxLineBytesSlack = 64 << 10

// DecodeOptions configure a Decoder.
type DecodeOptions struct {
	// Tenant is set on every event that has none. An event that names
	// another tenant is an item error (ErrTenantMismatch). Empty means each
	// event must name its own tenant.
	Tenant string
	// Limits bound each event; zero fields mean the defaults.
	Limits Limits
	// MaxEvents bounds the events in one body: the item after the last
	// allowed one makes Next return ErrTooManyEvents. 0 means unlimited.
	MaxEvents int
	// MaxLineBytes bounds one NDJSON line (without its newline) or one JSON
	// array element. A longer one is an item error (ErrLineTooLong) and is
	// skipped without being buffered. Default Limits.MaxPayloadBytes +
	// MaxLineBytesSlack.
	MaxLineBytes int
	// Now gives occurred_at for events that leave it out (or set it to
	// null): the time the request was decoded. Default time.Now.
	Now func() time.Time
}

// Decoded is what a Decoder made of one item of a body (an NDJSON line
// or a JSON array element): its event, or the reason it was rejected.
type Decoded struct {
	// Index is the 0-based position of the item among the items of the
	// body (blank NDJSON lines are not items).
	Index int
	// Line is the 1-based NDJSON line number (blank lines count); 0 for a
	// JSON array.
	Line int
	// Event is the decoded event when Err is nil: valid under the options'
	// Limits, with Tenant and OccurredAt filled in.
	Event Event
	// Err is the problem with this item, an *ItemError whose message starts
	// with the position ("line 3: version is required"). It wraps a
	// *ValidationError (ErrInvalidEvent) or ErrLineTooLong, or, for an
	// NDJSON line, ErrMalformedJSON.
	Err error
}

// Decoder reads events from an ingest request body one at a time, holding at
// most one line or element in memory.
//
// Rules, beyond Event.Validate:
//   - Field names are case-sensitive; an unknown or repeated field is an
//     item error that names it. null counts as absent, except that a null
//     payload is not an object.
//   - A missing occurred_at is DecodeOptions.Now().
//   - NDJSON: blank lines are skipped; a malformed line is an item error and
//     decoding goes on with the next line.
//   - JSON array: a well-formed element that breaks a rule is an item error;
//     a syntax error anywhere ends decoding (Next returns an error wrapping
//     ErrMalformedJSON); the items before it stay valid.
//   - A UTF-8 byte order mark at the start is ignored.
type Decoder struct {
	br     *bufio.Reader
	format Format
	opts   DecodeOptions
	buf    []byte
	index  int
	line   int   // NDJSON: lines consumed
	off    int64 // JSON array: bytes consumed
	state  int   // JSON array: arrayStart, arrayFirst, arrayNext, arrayDone
	err    error // sticky
}

const (
	arrayStart = iota
	arrayFirst
	arrayNext
	arrayDone
)

// NewDecoder returns a Decoder reading r in format f.
func NewDecoder(r io.Reader, f Format, opts DecodeOptions) *Decoder {
	opts.Limits = opts.Limits.WithDefaults()
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = opts.Limits.MaxPayloadBytes + MaxLineBytesSlack
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Decoder{br: bufio.NewReaderSize(r, 64<<10), format: f, opts: opts}
}

// Next returns the next item. It returns io.EOF after the last one. Any other
// error means the body cannot be read further: a JSON array syntax error
// (ErrMalformedJSON), ErrTooManyEvents, or the reader's error, wrapped so
// errors.As finds it (*http.MaxBytesError, say). Items returned before the
// error stay valid. After an error Next keeps returning it.
func (d *Decoder) Next() (Decoded, error) {
	if d.err != nil {
		return Decoded{}, d.err
	}
	var it Decoded
	var err error
	switch d.format {
	case FormatNDJSON:
		it, err = d.nextLine()
	case FormatJSONArray:
		it, err = d.nextElement()
	default:
		err = fmt.Errorf("events: unknown format %v", d.format)
	}
	if err != nil {
		d.err = err
		return Decoded{}, err
	}
	return it, nil
}

// newItem reserves the next index, enforcing MaxEvents.
func (d *Decoder) newItem(line int) (Decoded, error) {
	if d.opts.MaxEvents > 0 && d.index >= d.opts.MaxEvents {
		return Decoded{}, fmt.Errorf("%w: the limit is %d per request", ErrTooManyEvents, d.opts.MaxEvents)
	}
	it := Decoded{Index: d.index, Line: line}
	d.index++
	return it, nil
}

// finish turns raw (a line or an element) into the item's event or error.
func (d *Decoder) finish(it Decoded, raw []byte) Decoded {
	ev, hasTime, err := parseEvent(raw, true)
	if err == nil {
		err = d.complete(&ev, hasTime)
	}
	if err != nil {
		it.Err = &ItemError{Index: it.Index, Line: it.Line, Err: err}
		return it
	}
	it.Event = ev
	return it
}

func (d *Decoder) complete(ev *Event, hasTime bool) error {
	switch {
	case ev.Tenant == "":
		ev.Tenant = d.opts.Tenant
	case d.opts.Tenant != "" && ev.Tenant != d.opts.Tenant:
		return &ValidationError{Field: "tenant", Reason: fmt.Sprintf("%s does not match the request's tenant %s", quote(ev.Tenant), quote(d.opts.Tenant)), Err: ErrTenantMismatch}
	}
	if !hasTime {
		ev.OccurredAt = d.opts.Now()
	}
	return ev.validate(d.opts.Limits, true) // the whole item passed json.Valid
}

func (d *Decoder) tooLong(it Decoded, n int64) Decoded {
	what := "element"
	if it.Line > 0 {
		what = "line"
	}
	it.Err = &ItemError{Index: it.Index, Line: it.Line, Err: &ValidationError{
		Reason: fmt.Sprintf("%s is %d bytes, limit %d", what, n, d.opts.MaxLineBytes),
		Err:    ErrLineTooLong,
	}}
	return it
}

// --- NDJSON ---

func (d *Decoder) nextLine() (Decoded, error) {
	for {
		line, n, tooLong, err := d.readLine()
		if err != nil {
			return Decoded{}, err
		}
		d.line++
		if !tooLong && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		it, err := d.newItem(d.line)
		if err != nil {
			return Decoded{}, err
		}
		if tooLong {
			return d.tooLong(it, n), nil
		}
		if !Valid(line) {
			pos, msg := syntaxError(line)
			it.Err = &ItemError{Index: it.Index, Line: it.Line, Err: &ValidationError{
				Reason: fmt.Sprintf("malformed JSON at column %d: %s", pos+1, msg), Err: ErrMalformedJSON}}
			return it, nil
		}
		return d.finish(it, line), nil
	}
}

// readLine reads one line without its '\n'. A line longer than MaxLineBytes
// is consumed without being kept: tooLong reports it and n counts its bytes.
// It returns io.EOF only when no bytes are left.
func (d *Decoder) readLine() (line []byte, n int64, tooLong bool, err error) {
	d.buf = d.buf[:0]
	for {
		chunk, err := d.br.ReadSlice('\n')
		if d.line == 0 && n == 0 {
			chunk = bytes.TrimPrefix(chunk, bom)
		}
		end := len(chunk)
		if end > 0 && chunk[end-1] == '\n' {
			end--
		}
		n += int64(end)
		if !tooLong {
			if len(d.buf)+end > d.opts.MaxLineBytes {
				tooLong = true
				d.buf = d.buf[:0]
			} else {
				d.buf = append(d.buf, chunk[:end]...)
			}
		}
		switch {
		case err == nil:
			return d.buf, n, tooLong, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && (n > 0 || len(chunk) > 0):
			return d.buf, n, tooLong, nil // last line without a newline
		case err == io.EOF:
			return nil, 0, false, io.EOF
		default:
			return nil, 0, false, fmt.Errorf("read line %d: %w", d.line+1, err)
		}
	}
}

var bom = []byte("\xef\xbb\xbf")

// --- JSON array ---

func (d *Decoder) nextElement() (Decoded, error) {
	switch d.state {
	case arrayDone:
		return Decoded{}, io.EOF
	case arrayStart:
		if b, err := d.br.Peek(3); err == nil && bytes.Equal(b, bom) {
			_, _ = d.br.Discard(3)
			d.off += 3
		}
		c, err := d.nonSpace()
		if err == io.EOF {
			return Decoded{}, d.syntaxErr(d.off, "empty body; expected a JSON array of events")
		}
		if err != nil {
			return Decoded{}, err
		}
		if c != '[' {
			return Decoded{}, d.syntaxErr(d.off-1, fmt.Sprintf("expected '[' to start the array of events, found %s", quoteByte(c)))
		}
		d.state = arrayFirst
	}
	c, err := d.nonSpace()
	if err != nil {
		return Decoded{}, d.eofIsSyntax(err)
	}
	switch {
	case c == ']' && d.state == arrayFirst:
		return Decoded{}, d.end()
	case d.state == arrayNext && c == ']':
		return Decoded{}, d.end()
	case d.state == arrayNext && c == ',':
		if c, err = d.nonSpace(); err != nil {
			return Decoded{}, d.eofIsSyntax(err)
		}
	case d.state == arrayNext:
		return Decoded{}, d.syntaxErr(d.off-1, fmt.Sprintf("expected ',' or ']' after an element, found %s", quoteByte(c)))
	}
	switch c {
	case ']', ',', '}', ':':
		return Decoded{}, d.syntaxErr(d.off-1, fmt.Sprintf("expected an event, found %s", quoteByte(c)))
	}
	d.state = arrayNext
	it, err := d.newItem(0)
	if err != nil {
		return Decoded{}, err
	}
	start := d.off - 1
	n, tooLong, err := d.readValue(c)
	if err != nil {
		return Decoded{}, err
	}
	if tooLong {
		return d.tooLong(it, n), nil
	}
	if !Valid(d.buf) {
		pos, msg := syntaxError(d.buf)
		return Decoded{}, d.syntaxErr(start+pos, fmt.Sprintf("element %d: %s", it.Index, msg))
	}
	return d.finish(it, d.buf), nil
}

// end consumes what follows the closing ']', which may only be whitespace.
func (d *Decoder) end() error {
	d.state = arrayDone
	c, err := d.nonSpace()
	switch {
	case err == io.EOF:
		return io.EOF
	case err != nil:
		return err
	}
	return d.syntaxErr(d.off-1, fmt.Sprintf("unexpected %s after the closing ']'", quoteByte(c)))
}

// readValue reads the JSON value whose first byte c was just read into
// d.buf, or skips it when it exceeds MaxLineBytes. It checks structure
// only; json.Valid checks the rest.
func (d *Decoder) readValue(c byte) (n int64, tooLong bool, err error) {
	d.buf = append(d.buf[:0], c)
	n = 1
	add := func(c byte) {
		n++
		if tooLong {
			return
		}
		if len(d.buf) >= d.opts.MaxLineBytes {
			tooLong = true
			d.buf = d.buf[:0]
			return
		}
		d.buf = append(d.buf, c)
	}
	depth := 0
	inString := false
	switch c {
	case '{', '[':
		depth = 1
	case '"':
		inString = true
	default: // a scalar runs until a delimiter
		for {
			c, err := d.readByte()
			if err != nil {
				return n, tooLong, d.eofIsSyntax(err)
			}
			switch c {
			case ',', ']', ' ', '\t', '\n', '\r':
				_ = d.br.UnreadByte()
				d.off--
				return n, tooLong, nil
			}
			add(c)
		}
	}
	for {
		c, err := d.readByte()
		if err != nil {
			return n, tooLong, d.eofIsSyntax(err)
		}
		add(c)
		switch {
		case inString && c == '\\':
			c, err := d.readByte()
			if err != nil {
				return n, tooLong, d.eofIsSyntax(err)
			}
			add(c)
		case inString && c == '"':
			inString = false
			if depth == 0 {
				return n, tooLong, nil
			}
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return n, tooLong, nil
			}
		}
	}
}

func (d *Decoder) readByte() (byte, error) {
	c, err := d.br.ReadByte()
	if err == nil {
		d.off++
	}
	return c, err
}

func (d *Decoder) nonSpace() (byte, error) {
	for {
		c, err := d.readByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, nil
		}
	}
}

func (d *Decoder) eofIsSyntax(err error) error {
	if err == io.EOF {
		return d.syntaxErr(d.off, "unexpected end of body inside the array")
	}
	return fmt.Errorf("read body at byte %d: %w", d.off, err)
}

// syntaxErr reports a JSON array syntax error at 0-based byte pos.
func (d *Decoder) syntaxErr(pos int64, msg string) error {
	return fmt.Errorf("%w at byte %d: %s", ErrMalformedJSON, pos, msg)
}
