package jsonrpc

import (
	"slices"
	"strings"
)

// IDScanner recovers the top-level "id" of a frame that is read in pieces
// and never held whole, such as a message over the size limit, and which
// kind of message the frame is. A transport feeds it the frame's bytes as it
// discards them and can then answer a refused request with its id instead of
// leaving the sender to wait forever — and leave a notification unanswered.
//
// The scan is syntactic only: it follows strings, escapes and nesting, and
// keeps at most maxScannedID bytes of the id value. A frame that is not valid
// JSON may yield no id, or an id from a member a full parser would reject;
// the caller uses it only to address an error response. When "id" appears
// more than once the last one counts, as it does for Decode.
type IDScanner struct {
	depth     int
	inString  bool
	escaped   bool
	wantKey   bool // at depth 1, the next string is a member name
	inKey     bool
	key       []byte
	member    string // the top-level member whose value comes next
	wantValue bool   // at depth 1, after ':' and before the value starts
	capturing bool
	value     []byte
	done      bool // a complete id value was read
	overflow  bool
	seen      map[string]bool // top-level members seen: id, method, result, error
}

const maxScannedID = 256

// Write feeds the next bytes of the frame. It never fails.
func (s *IDScanner) Write(p []byte) (int, error) {
	for _, c := range p {
		s.step(c)
	}
	return len(p), nil
}

// ID returns the id found so far, if a complete one was seen.
func (s *IDScanner) ID() (ID, bool) {
	if !s.done || s.overflow {
		return ID{}, false
	}
	id, err := ParseID(s.value)
	return id, err == nil
}

// Kind is the kind of message the frame appears to be, by the top-level
// members seen so far, as Decode classifies them; 0 when it has none of
// them.
func (s *IDScanner) Kind() Kind {
	switch {
	case s.seen["method"] && s.seen["id"]:
		return KindRequest
	case s.seen["method"]:
		return KindNotification
	case s.seen["result"] || s.seen["error"]:
		return KindResponse
	}
	return 0
}

func (s *IDScanner) keep(c byte) {
	if len(s.value) >= maxScannedID {
		s.overflow = true
		return
	}
	s.value = append(s.value, c)
}

func (s *IDScanner) step(c byte) {
	if s.inString {
		if s.capturing {
			s.keep(c)
		} else if s.inKey && len(s.key) < 8 {
			s.key = append(s.key, c)
		}
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
			if s.inKey {
				s.inKey = false
				s.member = ""
				if name, ok := strings.CutSuffix(string(s.key), `"`); ok && slices.Contains(scannedMembers, name) {
					s.member = name
					if s.seen == nil {
						s.seen = map[string]bool{}
					}
					s.seen[name] = true
				}
			} else if s.capturing {
				s.capturing, s.done = false, true
			}
		}
		return
	}
	if s.capturing { // a number or literal ends at the first structural byte
		switch c {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			s.capturing, s.done = false, true
		default:
			s.keep(c)
			return
		}
	}
	switch c {
	case '"':
		s.inString = true
		if s.depth == 1 && s.wantKey {
			s.wantKey, s.inKey = false, true
			s.key = s.key[:0]
		} else if s.depth == 1 && s.wantValue {
			s.wantValue = false
			if s.member == "id" {
				s.startValue('"')
			}
		}
	case '{', '[':
		if s.depth == 1 {
			s.wantValue = false
		}
		s.depth++
		if s.depth == 1 && c == '{' {
			s.wantKey = true
		}
	case '}', ']':
		s.depth--
	case ':':
		if s.depth == 1 {
			s.wantValue = true
		}
	case ',':
		if s.depth == 1 {
			s.wantKey, s.wantValue = true, false
		}
	case ' ', '\t', '\r', '\n':
	default:
		if s.depth == 1 && s.wantValue {
			s.wantValue = false
			if s.member == "id" {
				s.startValue(c)
			}
		}
	}
}

// scannedMembers are the top-level members whose presence decides a
// message's kind.
var scannedMembers = []string{"id", "method", "result", "error"}

// startValue begins capturing an id value, replacing any earlier one: the
// last "id" member counts.
func (s *IDScanner) startValue(first byte) {
	s.capturing, s.done, s.overflow = true, false, false
	s.value = append(s.value[:0], first)
}
