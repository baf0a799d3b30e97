package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcprel/mcprel/internal/readmetest"
	"github.com/mcprel/mcprel/mcp"
)

// TestReadmeShowsThisFile keeps the README's library example compiling:
// the README must quote main.go verbatim.
func TestReadmeShowsThisFile(t *testing.T) {
	readmetest.QuotesFile(t, "main.go")
}

// The tool's description promises "safe to retry"; what it advertises in
// tools/list must say the same, or a client following the advertised
// retry class treats a lost greeting as a possible duplicate effect.
func TestAdvertisesWhatItDescribes(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hello")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}
`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hello: %v\n%s", err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		var resp struct {
			ID     int `json:"id"`
			Result struct {
				Tools []struct {
					Description string         `json:"description"`
					Meta        map[string]any `json:"_meta"`
				} `json:"tools"`
			} `json:"result"`
		}
		if json.Unmarshal([]byte(line), &resp) != nil || resp.ID != 2 {
			continue
		}
		if len(resp.Result.Tools) != 1 {
			t.Fatalf("tools/list: %s", line)
		}
		tool := resp.Result.Tools[0]
		if !strings.Contains(tool.Description, "safe to retry") || tool.Meta[mcp.MetaRetryClass] != "safe" {
			t.Fatalf("greet is described as %q and advertises retry class %v", tool.Description, tool.Meta[mcp.MetaRetryClass])
		}
		return
	}
	t.Fatalf("no tools/list response:\n%s", out)
}
