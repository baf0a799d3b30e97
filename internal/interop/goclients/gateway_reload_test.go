package goclients_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// reloadConfig writes a gateway config file serving one mcprel "serve
// --stdio" upstream per name, whole then renamed: a reload never reads
// half a file.
func reloadConfig(t *testing.T, path string, names ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %s:\n    command: %s\n    args: [serve, --stdio, --db, %s]\n", n, binary, filepath.Join(filepath.Dir(path), n+".db"))
	}
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// The official Go SDK's client, connected to a gateway run from a config
// file, is told the tool list changed when a SIGHUP reloads the file, and
// lists the tools of the upstream added, not those of the one removed.
func TestGoSDKSeesAGatewayReload(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "gateway.yaml")
			reloadConfig(t, path, "a", "b")
			cmd := exec.Command(binary, "gateway", "--config", path, "--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Stopped gracefully, so that its upstreams are gone before
			// their directory is removed.
			t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
			br := bufio.NewReader(stderr)
			url, err := br.ReadString('\n')
			if err != nil || !strings.HasPrefix(url, "http://") {
				t.Fatalf("the gateway printed %q, %v", url, err)
			}
			log := newServerLog()
			go log.consume(br)

			changed := make(chan struct{}, 16)
			client := mcp.NewClient(&mcp.Implementation{Name: "mcprel-interop-gosdk", Version: "0.0.0"}, &mcp.ClientOptions{
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
					select {
					case changed <- struct{}{}:
					default:
					}
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: strings.TrimSpace(url), MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer cs.Close()
			names := func() []string {
				res, err := cs.ListTools(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, tool := range res.Tools {
					out = append(out, tool.Name)
				}
				return out
			}
			if got := names(); !slices.Contains(got, "a_echo") || !slices.Contains(got, "b_echo") {
				t.Fatalf("before the reload: %q", got)
			}
			// Until the client listens, a notification may have no
			// stream to go on: the handler's first call after the
			// SIGHUP is awaited, and the list read after it.
			for len(changed) > 0 {
				<-changed
			}
			reloadConfig(t, path, "a", "c")
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("the Go SDK was never told the tool list changed:\n%s", log)
			}
			// The list changes as the new upstream is listed: read until
			// it has, within the wait.
			for {
				got := names()
				if slices.Contains(got, "c_echo") && !slices.Contains(got, "b_echo") && slices.Contains(got, "a_echo") {
					break
				}
				select {
				case <-changed:
				case <-ctx.Done():
					t.Fatalf("after the reload the Go SDK lists %q", got)
				case <-time.After(100 * time.Millisecond): // the next notification may be coalesced with this one
				}
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "c_echo", Arguments: map[string]any{"text": "after"}})
			if err != nil || res.IsError {
				t.Fatalf("c_echo after the reload: %+v %v", res, err)
			}
		})
	}
}
