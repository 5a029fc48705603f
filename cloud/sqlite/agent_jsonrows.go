package sqlite

import "strconv"

// jsonRows builds a JSON array of rows, each an array of column values, to
// bind as the one argument of a statement that reads it with json_each
// (value->>i is column i of a row). The buffer is reused from one
// transaction to the next.
type jsonRows struct {
	b []byte
	n int // rows
	// first is set while the current row has no value yet.
	first bool
}

func (r *jsonRows) reset() { r.b, r.n = r.b[:0], 0 }

// row starts a new row.
func (r *jsonRows) row() *jsonRows {
	if r.n == 0 {
		r.b = append(r.b, '[')
	} else {
		r.b = append(r.b, "],"...)
	}
	r.b = append(r.b, '[')
	r.n++
	r.first = true
	return r
}

func (r *jsonRows) sep() {
	if !r.first {
		r.b = append(r.b, ',')
	}
	r.first = false
}

func (r *jsonRows) int(v int64) *jsonRows {
	r.sep()
	r.b = strconv.AppendInt(r.b, v, 10)
	return r
}

func (r *jsonRows) bool(v bool) *jsonRows {
	r.sep()
	r.b = strconv.AppendBool(r.b, v)
	return r
}

func (r *jsonRows) null() *jsonRows {
	r.sep()
	r.b = append(r.b, "null"...)
	return r
}

// str appends s as a JSON string that SQLite's ->> gives back as the same
// text: quotes, backslashes and control characters escaped, everything else
// (including bytes that are not UTF-8) as is.
func (r *jsonRows) str(s string) *jsonRows {
	r.sep()
	r.b = append(r.b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		r.b = append(r.b, s[start:i]...)
		switch c {
		case '"', '\\':
			r.b = append(r.b, '\\', c)
		default:
			const hex = "0123456789abcdef"
			r.b = append(r.b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	r.b = append(r.b, s[start:]...)
	r.b = append(r.b, '"')
	return r
}

// text returns the array (an empty one for no rows).
func (r *jsonRows) text() string {
	if r.n == 0 {
		return "[]"
	}
	return string(r.b) + "]]"
}
