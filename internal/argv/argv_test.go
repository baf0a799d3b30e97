package argv

import (
	"errors"
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  \t ", nil},
		{"mcprel serve --stdio", []string{"mcprel", "serve", "--stdio"}},
		{`mcprel  serve --db "/tmp/a b.db"`, []string{"mcprel", "serve", "--db", "/tmp/a b.db"}},
		{`a 'b "c" d' e`, []string{"a", `b "c" d`, "e"}},
		{`a ""`, []string{"a", ""}},
		{`x="a b"`, []string{"x=a b"}},
		{`$HOME ~ *.go \n`, []string{"$HOME", "~", "*.go", `\n`}}, // nothing expanded
	} {
		got, err := Split(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{`a "b`, `a 'b c`} {
		if _, err := Split(in); !errors.Is(err, ErrUnterminatedQuote) {
			t.Errorf("Split(%q): %v, want ErrUnterminatedQuote", in, err)
		}
	}
}
