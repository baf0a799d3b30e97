package inspector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcprel/mcprel/internal/argv"
)

// readmeInspector is how the README starts the Inspector; the test runs
// the same package from node_modules, pinned to the same version.
const readmeInspector = "npx -y @modelcontextprotocol/inspector@2.12.0"

// The README's Inspector lines, run as written (the binary, the working
// directory and the example port put in their places), in order, against
// one fresh server: a user who follows them gets a result from each, and
// the reservation succeeds on the stock the previous line created.
func TestReadmeInspectorLines(t *testing.T) {
	if _, err := os.Stat(inspector); err != nil {
		why := "internal/interop/inspector/node_modules is missing: run `npm ci` in internal/interop/inspector"
		if os.Getenv("MCPREL_REQUIRE_INTEROP") == "1" {
			t.Fatal(why + " (MCPREL_REQUIRE_INTEROP=1)")
		}
		t.Skip(why)
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := shellLines(string(readme), readmeInspector)
	if len(lines) < 3 {
		t.Fatalf("the README shows %d Inspector lines, want the tools/list, set_stock and reserve_inventory ones", len(lines))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "mcprel")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../../cmd/mcprel").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	url := startHTTP(t, ctx, bin)
	here, _ := os.Getwd()
	for _, line := range lines {
		words, err := argv.Split(strings.ReplaceAll(strings.TrimPrefix(line, readmeInspector), "$PWD", dir))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		for i, w := range words {
			switch w {
			case "bin/mcprel":
				words[i] = bin
			case "http://127.0.0.1:8080/mcp":
				words[i] = url
			}
		}
		cmd := exec.CommandContext(ctx, filepath.Join(here, node), append([]string{filepath.Join(here, inspector)}, words...)...)
		cmd.Dir = dir
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s%s", line, err, out.Bytes(), errOut.Bytes())
		}
		var result struct {
			IsError bool            `json:"isError"`
			Tools   json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(out.Bytes(), &result); err != nil || result.IsError {
			t.Errorf("%s:\n%s", line, out.Bytes())
		}
	}
}

// shellLines returns the lines of the README's sh blocks that start with
// prefix, each joined with the lines its trailing backslashes continue.
func shellLines(readme, prefix string) []string {
	var found []string
	var current string
	inBlock := false
	for line := range strings.SplitSeq(readme, "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = line == "```sh"
			continue
		}
		if !inBlock {
			continue
		}
		if current != "" {
			current += " " + strings.TrimSpace(strings.TrimSuffix(line, "\\"))
		} else if strings.HasPrefix(line, prefix) {
			current = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
		}
		if current != "" && !strings.HasSuffix(line, "\\") {
			found = append(found, current)
			current = ""
		}
	}
	return found
}
