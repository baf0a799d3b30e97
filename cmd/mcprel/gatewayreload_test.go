package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/gateway"
	"github.com/mcprel/mcprel/host"
	"github.com/mcprel/mcprel/internal/oauthtest"
	"github.com/mcprel/mcprel/mcp"
)

// reloadConfig is a config file serving the upstreams names, each this
// binary's "serve --stdio" (tools echo, …) but for mail, the mailer.
func reloadConfig(t *testing.T, path string, extra string, names ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(extra)
	b.WriteString("upstreams:\n")
	for _, n := range names {
		if n == "mail" {
			fmt.Fprintf(&b, "  mail:\n    command: %s\n    args: [\"-test.run=^$\"]\n", os.Args[0])
			continue
		}
		fmt.Fprintf(&b, "  %s:\n    command: %s\n    args: [serve, --stdio]\n", n, binary)
	}
	// Written whole, then renamed: a reload never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// toolNames lists the gateway's tools.
func toolNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	tools, err := c.ListTools(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	return names
}

// gatewayLog keeps every line a gateway logs: startEndpointIn's channel
// drops lines nobody is reading, and a test that waits for one line must
// not lose it to the lines before it.
type gatewayLog struct {
	mu     sync.Mutex
	lines  []string
	closed bool
	more   chan struct{} // closed and replaced at each line
}

func collectLog(log <-chan string) *gatewayLog {
	g := &gatewayLog{more: make(chan struct{})}
	go func() {
		for l := range log {
			g.mu.Lock()
			g.lines = append(g.lines, l)
			close(g.more)
			g.more = make(chan struct{})
			g.mu.Unlock()
		}
		g.mu.Lock()
		g.closed = true
		close(g.more)
		g.mu.Unlock()
	}()
	return g
}

// await returns the first line from line from on that holds want, and
// the index after it; it fails when the gateway exits first or nothing
// comes for a minute.
func (g *gatewayLog) await(t *testing.T, from int, want string) (string, int) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		g.mu.Lock()
		for i := from; i < len(g.lines); i++ {
			if strings.Contains(g.lines[i], want) {
				l := g.lines[i]
				g.mu.Unlock()
				return l, i + 1
			}
		}
		from = len(g.lines)
		more, closed, all := g.more, g.closed, strings.Join(g.lines, "\n")
		g.mu.Unlock()
		if closed {
			t.Fatalf("the gateway exited before logging %q:\n%s", want, all)
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("the gateway never logged %q; it logged:\n%s", want, all)
		}
	}
}

// awaitLog waits, from the gateway's first line, for one holding want.
func awaitLog(t *testing.T, log *gatewayLog, want string) string {
	t.Helper()
	l, _ := log.await(t, 0, want)
	return l
}

// startConfigGateway starts "mcprel gateway ARGS" in dir with env, its
// log collected; at cleanup it is stopped gracefully and waited for, so
// that its upstreams (which keep their databases in dir) are gone before
// dir is removed.
func startConfigGateway(t *testing.T, dir string, env []string, args ...string) (string, *exec.Cmd, *gatewayLog) {
	t.Helper()
	url, cmd, lines := startEndpointIn(t, dir, env, args...)
	log := collectLog(lines)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	return url, cmd, log
}

// SIGHUP reloads the config file: an upstream added is served, one
// removed is not, one unchanged keeps its process; a call in flight to
// the upstream removed finishes with its answer; a file that does not
// load is refused, its line named, and the gateway keeps serving what it
// served.
func TestGatewayConfigReload(t *testing.T) {
	dir := t.TempDir()
	sentFile := filepath.Join(dir, "sent")
	path := filepath.Join(dir, "gateway.yaml")
	reloadConfig(t, path, "shutdown-grace: 30s\n", "a", "mail")
	url, cmd, log := startConfigGateway(t, dir, []string{mailerEnv + "=" + sentFile}, "gateway", "--config", path,
		"--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
	c, err := client.DialHTTP(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if names := toolNames(t, c); !slices.Contains(names, "a_echo") || !slices.Contains(names, "mail_send_email") {
		t.Fatalf("before the reload: %q", names)
	}
	// A call in flight to mail, which the reload removes: it answers
	// after the reload began, and its answer reaches its caller.
	answered := make(chan error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "mail_send_email", map[string]any{"to": "ops", "delayMs": 3000}, nil)
		if err == nil && (res.IsError || !strings.Contains(resultText(res), "sent to ops")) {
			err = fmt.Errorf("the call in flight got %+v", res)
		}
		answered <- err
	}()
	for deadline := time.Now().Add(time.Minute); countLines(t, sentFile) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the mailer never sent")
		}
	}
	reloadConfig(t, path, "shutdown-grace: 30s\n", "a", "b")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line := awaitLog(t, log, "gateway: reloaded")
	for _, want := range []string{"added=[b]", "removed=[mail]", "unchanged=[a]"} {
		if !strings.Contains(line, want) {
			t.Errorf("the reload's log line says %s, not %s", line, want)
		}
	}
	if err := <-answered; err != nil {
		t.Errorf("the call in flight to the upstream removed: %v", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		names := toolNames(t, c)
		if slices.Contains(names, "b_echo") && !slices.Contains(names, "mail_send_email") && slices.Contains(names, "a_echo") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reload the gateway lists %q", names)
		}
	}
	if res, err := c.CallTool(t.Context(), "b_echo", map[string]any{"text": "new"}, nil); err != nil || res.IsError {
		t.Errorf("b_echo after the reload: %+v %v", res, err)
	}
	if res, err := c.CallTool(t.Context(), "mail_send_email", map[string]any{"to": "x"}, nil); err == nil && !res.IsError {
		t.Errorf("a tool of the upstream removed was served: %+v", res)
	}

	// A broken file: refused, the line named, the running config kept.
	if err := os.WriteFile(path, []byte("shutdown-grace: 30s\nhtpp: nowhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	line = awaitLog(t, log, "reload refused")
	if !strings.Contains(line, "gateway.yaml:2: htpp: not a setting") {
		t.Errorf("the refusal does not name the line and the key: %s", line)
	}
	if res, err := c.CallTool(t.Context(), "b_echo", map[string]any{"text": "kept"}, nil); err != nil || res.IsError {
		t.Errorf("b_echo after a refused reload: %+v %v", res, err)
	}
}

// --watch reloads the file when it changes, without a signal.
func TestGatewayConfigWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	reloadConfig(t, path, "", "a", "b")
	url, _, log := startConfigGateway(t, dir, nil, "gateway", "--config", path, "--watch",
		"--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
	c, err := client.DialHTTP(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toolNames(t, c)
	reloadConfig(t, path, "", "a", "c")
	awaitLog(t, log, "gateway: config file applied")
	if names := toolNames(t, c); !slices.Contains(names, "c_echo") || slices.Contains(names, "b_echo") {
		t.Errorf("after the file changed the gateway lists %q", names)
	}
}

// A reload that names a new variable for an upstream's token is refused:
// stdio upstreams started after it would inherit that token, which is
// hidden from them only as the gateway starts.
func TestGatewayConfigReloadRefusesANewTokenVariable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	reloadConfig(t, path, "", "a", "b")
	_, cmd, log := startConfigGateway(t, dir, []string{"CMDTEST_NEW_TOKEN=new-secret-token"}, "gateway", "--config", path,
		"--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
	more := "  h:\n    url: http://127.0.0.1:1/mcp\n    token-env: CMDTEST_NEW_TOKEN\n"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, more...), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	line := awaitLog(t, log, "reload refused")
	if !strings.Contains(line, "token-env CMDTEST_NEW_TOKEN is new") || strings.Contains(line, "new-secret-token") {
		t.Errorf("the refusal: %s", line)
	}
}

// An upstream that signs in by OAuth keeps its Authorizer, and so its
// connection and tokens, through a reload that leaves its settings as
// they were: it is unchanged, not restarted.
func TestGatewayConfigReloadKeepsOAuthUpstreams(t *testing.T) {
	as := oauthtest.New(t, oauthtest.Options{})
	as.RegisterClient(oauthtest.Client{ID: "gateway-1", Secret: "first-secret-value"})
	guard := protectedUpstream(t, as)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("first-secret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.yaml")
	demo := fmt.Sprintf("  demo:\n    url: %s\n    oauth-client-id: gateway-1\n    oauth-client-secret-file: secret\n", guard.public)
	withDemo := func(names ...string) {
		reloadConfig(t, path, "", names...)
		data, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(path, append(data, demo...), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	withDemo("a")
	_, cmd, log := startConfigGateway(t, dir, nil, "gateway", "--config", path, "--http", "127.0.0.1:0", "--db", filepath.Join(dir, "gw.db"))
	withDemo("a", "b")
	cmd.Process.Signal(syscall.SIGHUP)
	line := awaitLog(t, log, "gateway: reloaded")
	if !strings.Contains(line, "added=[b]") || !strings.Contains(line, "restarted=[]") || !strings.Contains(line, "demo") {
		t.Errorf("the reload: %s", line)
	}
}

// A reload that opened the store of stored logins and was then refused
// closed that store: the reloader must not keep it for the next reload,
// whose stored-login upstreams would read a closed database.
func TestRefusedReloadKeepsNoClosedStore(t *testing.T) {
	t.Setenv(gatewayKeyEnv, replicaKey)
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	db := filepath.Join(dir, "gw.db")
	reloadConfig(t, path, "", "a")
	args := []string{"--config", path, "--db", db}
	p, err := planGateway(args, io.Discard, io.Discard, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	// A runtime without a gateway: every reload is refused, after the
	// plan opened what it needs.
	rt, err := host.New(t.Context(), &host.Options{Implementation: mcp.Implementation{Name: "reload-test", Version: "1"}, DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	r := &gatewayReloader{args: args, opts: &host.Options{DB: db, Gateway: &gateway.Options{}}, rt: rt, current: p,
		log: slog.New(slog.DiscardHandler)}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, "  h:\n    url: http://127.0.0.1:1/mcp\n    oauth-login: true\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(t.Context(), "test"); err == nil {
		t.Fatal("a reload of a runtime without a gateway was applied")
	}
	if r.tokens != nil {
		t.Errorf("the refused reload's store, closed, is kept for the next")
	}
	r.closeAll()
}
