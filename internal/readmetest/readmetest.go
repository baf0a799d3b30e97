// Package readmetest keeps the README's code examples honest: a file the
// README shows must be quoted whole, so that the code a reader copies is
// the code a test compiles and runs.
package readmetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// QuotesFile fails t unless the module's README.md quotes file (a path
// from the test's package directory) verbatim in a ```go block.
func QuotesFile(t testing.TB, file string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		abs, _ := filepath.Abs(file)
		rel, _ := filepath.Rel(root, abs)
		t.Fatalf("README.md does not quote %s verbatim; copy the file into its ```go block", filepath.ToSlash(rel))
	}
}

// Block returns the first ```lang block of the module's README.md that
// contains text, as the README shows it (without its fences), so that a
// test can run what a reader copies; it fails t if there is none.
func Block(t testing.TB, lang, text string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rest := string(readme)
	for {
		_, after, ok := strings.Cut(rest, "```"+lang+"\n")
		if !ok {
			t.Fatalf("README.md has no ```%s block containing %q", lang, text)
		}
		block, next, ok := strings.Cut(after, "```\n")
		if !ok {
			t.Fatalf("README.md has a ```%s block that does not end", lang)
		}
		if strings.Contains(block, text) {
			return block
		}
		rest = next
	}
}

// moduleRoot is the nearest directory above the working directory (a
// test's package directory) that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", os.ErrNotExist
		}
		dir = up
	}
}
