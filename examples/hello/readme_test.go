package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShowsThisFile keeps the README's library example compiling: the
// README must quote main.go verbatim.
func TestReadmeShowsThisFile(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+string(src)+"```\n") {
		t.Fatal("README.md does not quote examples/hello/main.go verbatim; copy the file into its ```go block")
	}
}
