package agent

import "unicode/utf8"

// The text of a file is quoted as a JSON string by hand, rather than by
// encoding/json, for two reasons: an answer is sized before it is encoded
// (quotedSize must agree with appendQuoted byte for byte, which no library
// offers), and the encoding is the minimal one of RFC 8785 (JSON
// canonicalization), as jsontext.AppendQuote writes it: only '"', '\' and
// control bytes are escaped, not '<', '>' and '&' as encoding/json does for
// HTML, which would cost six bytes for each '<' of a source file.
//
// Invalid UTF-8 is replaced, byte by byte, with U+FFFD, as encoding/json
// and jsontext do: ACP's read_text_file answers text. The agent that
// writes such a file back writes the replacement characters.

// asciiQuoted is what each ASCII byte takes once quoted.
var asciiQuoted = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		switch {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			t[c] = 2
		case c < 0x20:
			t[c] = 6 // \u00XX
		default:
			t[c] = 1
		}
	}
	return t
}()

// quotedSize is how many bytes appendQuoted appends for p.
func quotedSize(p []byte) int {
	n := 0
	for i := 0; i < len(p); {
		if c := p[i]; c < utf8.RuneSelf {
			n += int(asciiQuoted[c])
			i++
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			n += len(string(utf8.RuneError))
		} else {
			n += size
		}
		i += size
	}
	return n
}

// appendQuoted appends p to dst as the inside of a JSON string (without the
// quotes).
func appendQuoted(dst, p []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(p); {
		c := p[i]
		if c < utf8.RuneSelf {
			if asciiQuoted[c] == 1 {
				i++
				continue
			}
			dst = append(dst, p[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, p[start:i]...)
			dst = utf8.AppendRune(dst, utf8.RuneError)
			start = i + 1
		}
		i += size
	}
	return append(dst, p[start:]...)
}
