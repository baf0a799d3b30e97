// Package oauthserve_test runs mcprel's HTTP listeners as OAuth 2.1
// protected resources against a real authorization server nobody here
// wrote, oidc-provider (package oidcprovider): `mcprel serve --http` and
// `mcprel gateway --http`, started as built, with tokens from
// oidc-provider's own endpoints. It needs what oidcprovider needs (Node
// and `npm ci` in internal/interop/oauth); without them every test skips,
// or fails under MCPREL_REQUIRE_INTEROP=1.
package oauthserve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// buildFlags are added to `go build` of mcprel and runEnv to its
// environment; race_test.go sets them so that `go test -race` race-checks
// the server too.
var buildFlags, runEnv []string

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(browserEnv); mode != "" && len(os.Args) > 1 {
		os.Exit(playBrowser(os.Args[len(os.Args)-1]))
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// mcprel builds cmd/mcprel once for the package, the first time a test
// that has its authorization server asks, and returns the binary's path.
func mcprel(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "mcprel-oauthserve")
		if buildErr != nil {
			return
		}
		binary = filepath.Join(buildDir, "mcprel")
		_, file, _, _ := runtime.Caller(0)
		build := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", binary, "./cmd/mcprel")...)
		build.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/mcprel: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// waitLimit bounds the wait for a listener's URL; a passing run never
// comes near it.
const waitLimit = 30 * time.Second

// listen runs mcprel with args (which make it listen over HTTP) and env,
// in a fresh directory, for the rest of the test, and returns the
// endpoint URL it prints first on stderr. The rest of its stderr is kept
// and shown if the test fails.
func listen(t *testing.T, env []string, args ...string) string {
	t.Helper()
	url, _ := listenLogged(t, env, args...)
	return url
}

// listenLogged is listen, also returning what the process has written
// on stderr so far, endpoint line included, for a test to read.
func listenLogged(t *testing.T, env []string, args ...string) (string, func() string) {
	t.Helper()
	cmd := exec.Command(mcprel(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(append(os.Environ(), runEnv...), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	first := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		br := bufio.NewReader(stderr)
		line, _ := br.ReadString('\n')
		first <- line
		mu.Lock()
		log.WriteString(line)
		mu.Unlock()
		for {
			line, err := br.ReadString('\n')
			mu.Lock()
			log.WriteString(line)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(log.String(), "WARNING: DATA RACE") {
			t.Errorf("mcprel %s reported a data race", args[0])
		}
		if t.Failed() {
			t.Logf("mcprel %s log:\n%s", args[0], log.String())
		}
	})
	var url string
	select {
	case url = <-first:
	case <-time.After(waitLimit):
		t.Fatalf("mcprel %s printed no URL within %v", strings.Join(args, " "), waitLimit)
	}
	url = strings.TrimSpace(url)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") {
		t.Fatalf("mcprel %s printed %q, not its endpoint URL", strings.Join(args, " "), url)
	}
	return url, func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
}

// answer is an HTTP exchange's outcome as a test judges it.
type answer struct {
	status    int
	challenge string // WWW-Authenticate
	body      string
}

func (a answer) String() string {
	return fmt.Sprintf("%d, WWW-Authenticate %q, body %s", a.status, a.challenge, a.body)
}

// call posts a 2026-07-28 tools/call of tool with args (a JSON object) to
// endpoint, with token as its bearer unless empty.
func call(t *testing.T, endpoint, token, tool, args string) answer {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, tool, args)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)}
}

// served fails the test unless a is a 200 whose body is the JSON-RPC
// result of a successful call (not a tool error), and returns the
// result's first text content.
func served(t *testing.T, what string, a answer) string {
	t.Helper()
	if a.status != http.StatusOK || a.challenge != "" {
		t.Fatalf("%s: %v; want 200", what, a)
	}
	// A response on a stream comes as one SSE event.
	payload := a.body
	if i := strings.Index(payload, "data: "); i >= 0 {
		payload, _, _ = strings.Cut(payload[i+len("data: "):], "\n")
	}
	var msg struct {
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(payload), &msg); err != nil || msg.Result == nil || msg.Result.IsError || len(msg.Result.Content) == 0 {
		t.Fatalf("%s: %v; want a successful result (%v)", what, a, err)
	}
	return msg.Result.Content[0].Text
}

// refused fails the test unless a is status with a Bearer challenge
// naming the endpoint's resource metadata, error code, an
// error_description containing why (when not empty), and the
// attributes in also; the body must be a JSON-RPC error.
func refused(t *testing.T, what, endpoint string, a answer, status int, code, why string, also ...string) {
	t.Helper()
	meta := strings.TrimSuffix(endpoint, "/mcp") + "/.well-known/oauth-protected-resource/mcp"
	ok := a.status == status && strings.HasPrefix(a.challenge, "Bearer ") &&
		strings.Contains(a.challenge, `resource_metadata="`+meta+`"`) &&
		strings.Contains(a.challenge, `error="`+code+`"`) &&
		strings.Contains(a.body, `"error"`)
	if why != "" {
		ok = ok && strings.Contains(param(a.challenge, "error_description"), why)
	}
	for _, s := range also {
		ok = ok && strings.Contains(a.challenge, s)
	}
	if !ok {
		t.Fatalf("%s: %v; want %d, error=%q, a description with %q, and %q", what, a, status, code, why, also)
	}
}

// param is the value of the challenge's auth-param name, a quoted-string
// (RFC 9110 §5.6.4) unquoted; empty when absent.
func param(challenge, name string) string {
	_, rest, ok := strings.Cut(challenge, name+`="`)
	if !ok {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '"':
			return b.String()
		case c == '\\' && i+1 < len(rest):
			i++
			b.WriteByte(rest[i])
		default:
			b.WriteByte(c)
		}
	}
	return ""
}
