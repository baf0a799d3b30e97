package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcprel/mcprel/internal/mcptest"
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// signupSchema is the form the "signup" tool asks for.
const signupSchema = `{"type":"object","properties":{
	"name":{"type":"string","title":"Your name"},
	"color":{"type":"string","enum":["red","green","blue"],"default":"green"},
	"age":{"type":"integer","description":"in whole years"},
	"subscribe":{"type":"boolean"}},
	"required":["name","age"]}`

// askingServer is a server whose tools ask the client for input during
// the call (the 2025-11-25 era, over Streamable HTTP): signup elicits a
// form, muse asks for a model's reply, where lists the client's roots.
// Each answers with what it got, as JSON text.
func askingServer(t *testing.T) string {
	t.Helper()
	srv := mcptest.NewServer(t, nil)
	reply := func(v any, err error) (*mcp.CallToolResult, error) {
		if err != nil {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("error: " + err.Error())}}, nil
		}
		b, _ := json.Marshal(v)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text(string(b))}}, nil
	}
	tools := map[string]server.ToolHandler{
		"signup": func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return reply(req.Elicit(ctx, mcp.ElicitParams{Message: "Sign up for the newsletter", RequestedSchema: json.RawMessage(signupSchema)}))
		},
		"muse": func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			return reply(req.CreateMessage(ctx, mcp.CreateMessageParams{MaxTokens: 50,
				Messages: []mcp.SamplingMessage{{Role: "user", Content: mcp.Text("Name a colour.")}}}))
		},
		// The 2026-07-28 way: the call answers input_required, and the
		// client calls again with the answer.
		"signup2026": func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			if answer, ok := req.InputResponses["form"]; ok {
				return reply(answer, nil)
			}
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
				"form": server.ElicitRequest(mcp.ElicitParams{Message: "Sign up for the newsletter", RequestedSchema: json.RawMessage(signupSchema)}),
			}}
		},
		"where": func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			raw, err := req.CallClient(ctx, mcp.MethodListRoots, struct{}{})
			return reply(json.RawMessage(raw), err)
		},
	}
	for name, h := range tools {
		if err := srv.AddTool(server.Tool{Name: name}, h); err != nil {
			t.Fatal(err)
		}
	}
	h, err := streamhttp.NewHandler(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// openPTY opens a pseudo terminal: the controlling side the test types
// into and reads the questions from, and the terminal side the command
// gets as stdin and stderr.
func openPTY(t *testing.T) (control, term *os.File) {
	t.Helper()
	control, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo terminals here: %v", err)
	}
	t.Cleanup(func() { control.Close() })
	if err := unix.IoctlSetPointerInt(int(control.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(control.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return control, term
}

// screen collects what the command writes to the terminal, for the test
// to wait on a question before it types the answer.
type screen struct{ lines *mcptest.Lines }

func watch(control *os.File) screen {
	s := screen{lines: mcptest.NewLines()}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := control.Read(buf)
			if n > 0 {
				s.lines.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

// callOnTerminal runs "mcprel call" with a terminal as its stdin and
// stderr, and types each answer once its question (the key) is on the
// screen. It returns stdout and the exit status.
func callOnTerminal(t *testing.T, dialog [][2]string, args ...string) (string, int, string) {
	t.Helper()
	control, term := openPTY(t)
	scr := watch(control)
	cmd := exec.Command(binary, append([]string{"call"}, args...)...)
	var out bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = term, &out, term
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, step := range dialog {
		if !scr.lines.Await(step[0]) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the question %q never came; the screen:\n%s", step[0], scr.lines.String())
		}
		if _, err := control.Write([]byte(step[1] + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Wait()
	return out.String(), cmd.ProcessState.ExitCode(), scr.lines.String()
}

// On a terminal, an elicitation is a form asked field by field: the
// server's order, titles, descriptions, choices by number or value,
// defaults on an empty line, a required field asked again, a typed answer
// checked against its type; then the person confirms.
func TestCallAsksOnATerminal(t *testing.T) {
	url := askingServer(t)
	out, code, shown := callOnTerminal(t, [][2]string{
		{"Your name (string, required): ", ""}, // required: asked again
		{"an answer is required", "Ada"},
		{"[\"green\"]: ", "3"},                 // blue, by number
		{"age (integer, required): ", "forty"}, // not a whole number
		{"a whole number, please", "36"},       //
		{"subscribe (boolean): ", "y"},         //
		{"Send these answers? [Y/n/c] ", ""},   // yes, by default
	}, "--url", url, "--era", "2025", "signup")
	if code != 0 {
		t.Fatalf("exit %d; the screen:\n%s", code, shown)
	}
	for _, want := range []string{"Sign up for the newsletter", "1) red", "3) blue", "in whole years"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the screen lacks %q:\n%s", want, shown)
		}
	}
	want := `{\"action\":\"accept\",\"content\":{\"age\":36,\"color\":\"blue\",\"name\":\"Ada\",\"subscribe\":true}}`
	if !strings.Contains(out, want) {
		t.Fatalf("the tool got %s, want the content %s", out, want)
	}
}

// In the 2026-07-28 era the same form is asked for an input_required
// result, and its answer sent with the call made again; without a
// terminal it is declined the same way.
func TestCallAsksOnATerminalIn2026(t *testing.T) {
	url := askingServer(t)
	out, code, shown := callOnTerminal(t, [][2]string{
		{"Your name (string, required): ", "Ada"},
		{"[\"green\"]: ", ""},
		{"age (integer, required): ", "36"},
		{"subscribe (boolean): ", ""},
		{"Send these answers? [Y/n/c] ", "y"},
	}, "--url", url, "--era", "2026", "signup2026")
	want := `{\"action\":\"accept\",\"content\":{\"age\":36,\"color\":\"green\",\"name\":\"Ada\"}}`
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, stdout %s, want the content %s; the screen:\n%s", code, out, want, shown)
	}
	out, errOut, code := mcprelCall(t, "--url", url, "--era", "2026", "signup2026")
	if code != 0 || !strings.Contains(out, `{\"action\":\"decline\"}`) || !strings.Contains(errOut, "no terminal to ask on") {
		t.Fatalf("without a terminal: exit %d, stdout %s, stderr %s", code, out, errOut)
	}
}

// A sampling request on a terminal shows the messages, and the person's
// line is the model's reply; an empty line declines it.
func TestCallAnswersSamplingOnATerminal(t *testing.T) {
	url := askingServer(t)
	out, code, shown := callOnTerminal(t, [][2]string{{"Reply as the model (an empty line declines): ", "teal"}},
		"--url", url, "--era", "2025", "muse")
	if code != 0 || !strings.Contains(shown, "[user] Name a colour.") || !strings.Contains(out, `\"text\":\"teal\"`) {
		t.Fatalf("exit %d, stdout %s; the screen:\n%s", code, out, shown)
	}
	out, _, _ = callOnTerminal(t, [][2]string{{"Reply as the model", ""}}, "--url", url, "--era", "2025", "muse")
	if !strings.Contains(out, "declined the sampling request") {
		t.Fatalf("an empty reply: %s", out)
	}
}

// Without a terminal nothing is asked: the elicitation is declined and
// stderr says how to answer, sampling is not offered; the call
// itself goes on. --answers answers as written; --roots offers the
// working directory.
func TestCallWithoutATerminal(t *testing.T) {
	url := askingServer(t)
	out, errOut, code := mcprelCall(t, "--url", url, "--era", "2025", "signup")
	if code != 0 || !strings.Contains(out, `{\"action\":\"decline\"}`) ||
		!strings.Contains(errOut, "no terminal to ask on: declined") || !strings.Contains(errOut, "--answers FILE") {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, out, errOut)
	}
	// No one to reply as a model: sampling is not declared at all, so the
	// server knows not to ask.
	out, _, _ = mcprelCall(t, "--url", url, "--era", "2025", "muse")
	if !strings.Contains(out, "did not declare the capability this request needs: sampling") {
		t.Fatalf("sampling without a terminal: %s", out)
	}

	file := filepath.Join(t.TempDir(), "answers.json")
	os.WriteFile(file, []byte(`{"elicitation/create": {"action": "accept", "content": {"name": "Grace", "age": 85}}}`), 0o600)
	out, _, code = mcprelCall(t, "--url", url, "--era", "2025", "--answers", file, "signup")
	if code != 0 || !strings.Contains(out, `\"content\":{\"age\":85,\"name\":\"Grace\"}`) {
		t.Fatalf("--answers: exit %d, %s", code, out)
	}

	dir := t.TempDir()
	cmd := exec.Command(binary, "call", "--url", url, "--era", "2025", "--roots", "where")
	cmd.Dir = dir
	got, _ := cmd.Output()
	if !strings.Contains(string(got), `file://`+dir) {
		t.Fatalf("--roots: %s, want the working directory %s", got, dir)
	}
	got, _ = exec.Command(binary, "call", "--url", url, "--era", "2025", "where").Output()
	if !strings.Contains(string(got), "error:") {
		t.Fatalf("roots without --roots: %s", got)
	}
}

// A broken --answers file is the command line's mistake, named as such,
// and nothing is called.
func TestCallAnswersFileMistakes(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"not JSON":               `accept`,
		"unknown method":         `{"tools/call": {}}`,
		"answer not JSON object": `{"elicitation/create": "yes"}`,
		"too large":              `{"elicitation/create": {"action": "accept", "content": {"pad": "` + strings.Repeat("x", 1<<20) + `"}}}`,
	} {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		os.WriteFile(file, []byte(content), 0o600)
		_, errOut, code := mcprelCall(t, "--url", "http://127.0.0.1:1/mcp", "--answers", file, "signup")
		if code != exitUsage || !strings.Contains(errOut, "--answers") {
			t.Errorf("%s: exit %d, stderr %s", name, code, errOut)
		}
	}
	_, errOut, code := mcprelCall(t, "--url", "http://127.0.0.1:1/mcp", "--answers", filepath.Join(dir, "missing.json"), "signup")
	if code != exitUsage || !strings.Contains(errOut, "missing.json") {
		t.Errorf("a missing file: exit %d, stderr %s", code, errOut)
	}
}
