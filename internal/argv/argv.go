// Package argv splits a command line written as one string into the
// words of an argv, without a shell: words are separated by blanks, and
// single or double quotes group blanks into a word. Nothing is expanded
// ($VAR, globs, ~) and no backslash escapes, so what a user writes in a
// flag such as --stdio "CMD" runs exactly as written, and cannot run
// anything else.
package argv

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnterminatedQuote is Split's refusal of a quote that is never closed.
var ErrUnterminatedQuote = errors.New("unterminated quote")

// Split returns the words of s. An empty or blank s has no words.
func Split(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%w in %q", ErrUnterminatedQuote, s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
