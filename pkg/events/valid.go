package events

// Valid reports whether b is one valid JSON value, surrounded by optional
// white space: exactly what encoding/json.Valid accepts (FuzzValid holds
// them equal), at a fraction of its cost. encoding/json steps a state
// machine through a function call per byte; every stored event is checked
// once by each sink that decodes it, so the difference shows in a sink's
// throughput (docs/sinks.md). Like encoding/json it does not check UTF-8
// and refuses nesting deeper than 10,000.
func Valid(b []byte) bool {
	p, ok := validValue(b, skipWS(b, 0), 0)
	return ok && skipWS(b, p) == len(b)
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// validValue checks the value at b[p] (white space before it skipped) and
// returns the index just past it.
func validValue(b []byte, p, depth int) (int, bool) {
	if p >= len(b) {
		return p, false
	}
	switch c := b[p]; c {
	case '"':
		return validString(b, p)
	case '{', '[':
		if depth++; depth > maxDepth {
			return p, false
		}
		end := byte(']')
		if c == '{' {
			end = '}'
		}
		if p = skipWS(b, p+1); p < len(b) && b[p] == end {
			return p + 1, true
		}
		for {
			var ok bool
			if c == '{' { // a member's name and colon
				if p >= len(b) || b[p] != '"' {
					return p, false
				}
				if p, ok = validString(b, p); !ok {
					return p, false
				}
				if p = skipWS(b, p); p >= len(b) || b[p] != ':' {
					return p, false
				}
				p = skipWS(b, p+1)
			}
			if p, ok = validValue(b, p, depth); !ok {
				return p, false
			}
			if p = skipWS(b, p); p >= len(b) {
				return p, false
			}
			switch b[p] {
			case ',':
				p = skipWS(b, p+1)
			case end:
				return p + 1, true
			default:
				return p, false
			}
		}
	case 't':
		return validLiteral(b, p, "true")
	case 'f':
		return validLiteral(b, p, "false")
	case 'n':
		return validLiteral(b, p, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return validNumber(b, p)
		}
		return p, false
	}
}

func validLiteral(b []byte, p int, lit string) (int, bool) {
	if len(b)-p < len(lit) || string(b[p:p+len(lit)]) != lit {
		return p, false
	}
	return p + len(lit), true
}

// validString checks the string literal at b[p] == '"'.
func validString(b []byte, p int) (int, bool) {
	for p++; p < len(b); p++ {
		switch c := b[p]; {
		case c == '"':
			return p + 1, true
		case c < 0x20:
			return p, false
		case c == '\\':
			if p++; p >= len(b) {
				return p, false
			}
			switch b[p] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-p <= 4 {
					return p, false
				}
				for _, h := range b[p+1 : p+5] {
					if !isHex(h) {
						return p, false
					}
				}
				p += 4
			default:
				return p, false
			}
		}
	}
	return p, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validNumber checks the number at b[p]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte, p int) (int, bool) {
	if b[p] == '-' {
		p++
	}
	switch {
	case p >= len(b):
		return p, false
	case b[p] == '0':
		p++
	case b[p] >= '1' && b[p] <= '9':
		p = digits(b, p+1)
	default:
		return p, false
	}
	if p < len(b) && b[p] == '.' {
		q := digits(b, p+1)
		if q == p+1 {
			return q, false
		}
		p = q
	}
	if p < len(b) && (b[p] == 'e' || b[p] == 'E') {
		p++
		if p < len(b) && (b[p] == '+' || b[p] == '-') {
			p++
		}
		q := digits(b, p)
		if q == p {
			return q, false
		}
		p = q
	}
	return p, true
}

func digits(b []byte, p int) int {
	for p < len(b) && b[p] >= '0' && b[p] <= '9' {
		p++
	}
	return p
}
