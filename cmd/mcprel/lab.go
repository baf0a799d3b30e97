package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Record is one piece of the demo's evidence: what a scenario did and what
// came of it, fact by fact, in the order a reader takes them in.
type Record struct {
	Section string
	Name    string
	Facts   []Fact
}

// Fact is one observation of a Record.
type Fact struct {
	Key   string
	Value any
}

// add appends a fact.
func (r *Record) add(key string, value any) { r.Facts = append(r.Facts, Fact{key, value}) }

// Get returns the value of the fact key, or nil.
func (r Record) Get(key string) any {
	for _, f := range r.Facts {
		if f.Key == key {
			return f.Value
		}
	}
	return nil
}

// MarshalJSON writes the record as {"section", "name", "facts": {…}}, the
// facts in their order.
func (r Record) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	head, _ := json.Marshal(struct {
		Section string `json:"section"`
		Name    string `json:"name"`
	}{r.Section, r.Name})
	b.Write(head[:len(head)-1])
	b.WriteString(`,"facts":{`)
	for i, f := range r.Facts {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.Key)
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteString("}}")
	return b.Bytes(), nil
}

// print writes the record for a reader.
func (r Record) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s: %s\n", r.Section, r.Name)
	width := 0
	for _, f := range r.Facts {
		width = max(width, len(f.Key))
	}
	for _, f := range r.Facts {
		fmt.Fprintf(w, "   %-*s  %v\n", width, f.Key, f.Value)
	}
}

// labProcess is "mcprel serve --stdio" as a child process, driven frame
// by frame: the lab shows the wire, so it writes the frames itself. The
// lab's (startLab) reads the server's JSON log as it is written, so that
// the demo can wait for a request's terminal state as the server recorded
// it.
type labProcess struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	logs   *logLines     // startLab only
	frames chan labFrame // once reading started
}

type labFrame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	raw    []byte          // the line, without its newline
	at     time.Time
}

// idIs reports whether the frame is the response to id.
func (f labFrame) idIs(id string) bool {
	return f.Method == "" && string(f.ID) == fmt.Sprintf("%q", id)
}

// startLab starts "mcprel serve --stdio --lab" on db with extra flags,
// its log read as JSON. Frames are not read until read is called.
func startLab(ctx context.Context, self, db string, extra ...string) (*labProcess, error) {
	return startStdio(ctx, self, append([]string{"serve", "--stdio", "--lab", "--db", db, "--log-format", "json"}, extra...), nil)
}

// startStdio starts this binary with args (a "serve --stdio" command
// line). Its stderr goes to stderr, or, when that is nil, is read as a
// JSON log into logs.
func startStdio(ctx context.Context, self string, args []string, stderr io.Writer) (*labProcess, error) {
	cmd := exec.CommandContext(ctx, self, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var logs io.Reader
	if stderr != nil {
		cmd.Stderr = stderr
	} else if logs, err = cmd.StderrPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: starting the server: %w", err)
	}
	p := &labProcess{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16)}
	if logs != nil {
		p.logs = newLogLines()
		go p.logs.read(logs)
	}
	return p, nil
}

// read starts reading the server's frames.
func (p *labProcess) read() {
	p.frames = make(chan labFrame, 1024)
	go func() {
		defer close(p.frames)
		for {
			line, err := p.out.ReadBytes('\n')
			if len(line) > 0 {
				var f labFrame
				json.Unmarshal(line, &f)
				f.raw, f.at = bytes.TrimSuffix(line, []byte("\n")), time.Now()
				p.frames <- f
			}
			if err != nil {
				return
			}
		}
	}()
}

// send writes one frame.
func (p *labProcess) send(frame string) error {
	_, err := io.WriteString(p.in, frame+"\n")
	return err
}

// call sends a tools/call of the modern era with id, tool and arguments
// (JSON), asking for progress under token when it is not empty.
func (p *labProcess) call(id, tool, args, token string) error {
	extra := ""
	if token != "" {
		extra = fmt.Sprintf(`,"progressToken":%q`, token)
	}
	return p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":%q,"arguments":%s,%s}}`, id, tool, args, modernMeta(extra)))
}

// cancel sends notifications/cancelled for id.
func (p *labProcess) cancel(id, reason string) error {
	return p.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%q,"reason":%q}}`, id, reason))
}

// next returns the next frame.
func (p *labProcess) next() (labFrame, error) {
	select {
	case f, ok := <-p.frames:
		if !ok {
			return f, p.exitCause()
		}
		return f, nil
	case <-time.After(20 * time.Second):
		return labFrame{}, errors.New("demo: no frame from the server within 20s")
	}
}

// until returns the frames up to and including the response to id.
func (p *labProcess) until(id string) ([]labFrame, error) {
	var seen []labFrame
	for {
		f, err := p.next()
		if err != nil {
			return seen, err
		}
		seen = append(seen, f)
		if f.idIs(id) {
			return seen, nil
		}
	}
}

// stop closes the server's input and waits for it to exit.
func (p *labProcess) stop() error {
	p.in.Close()
	// Read the pipes to their end before Wait closes them.
	if p.frames != nil {
		for range p.frames {
		}
	} else {
		io.Copy(io.Discard, p.out)
	}
	if p.logs != nil {
		p.logs.wait()
	}
	return p.cmd.Wait()
}

// exitCause says why the server closed its output: the last line it
// wrote that was not part of its JSON log is how a failing mcprel states
// its cause ("mcprel: store: cannot open ..."), which the demo's user
// needs more than the bare fact that the server is gone.
func (p *labProcess) exitCause() error {
	if p.logs != nil {
		p.logs.wait()
		if last := p.logs.lastPlain(); last != "" {
			return fmt.Errorf("demo: the server exited: %s", strings.TrimPrefix(last, "mcprel: "))
		}
	}
	return errors.New("demo: the server closed its output")
}

// logLines collects a server's JSON log lines as they are written, and
// the last few lines that were not JSON (a fatal error is printed plain).
type logLines struct {
	mu      sync.Mutex
	lines   []map[string]any
	plain   []string // the last maxPlainLines, each at most maxPlainBytes
	changed chan struct{}
	done    chan struct{}
}

const (
	maxPlainLines = 8
	maxPlainBytes = 1024
)

// lastPlain returns the last line that was not JSON, or "".
func (l *logLines) lastPlain() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.plain) == 0 {
		return ""
	}
	return l.plain[len(l.plain)-1]
}

func newLogLines() *logLines {
	return &logLines{changed: make(chan struct{}), done: make(chan struct{})}
}

func (l *logLines) read(r io.Reader) {
	defer close(l.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			if text := strings.TrimSpace(sc.Text()); text != "" {
				l.mu.Lock()
				l.plain = append(l.plain, text[:min(len(text), maxPlainBytes)])
				if len(l.plain) > maxPlainLines {
					l.plain = l.plain[1:]
				}
				l.mu.Unlock()
			}
			continue
		}
		l.mu.Lock()
		l.lines = append(l.lines, line)
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	}
}

func (l *logLines) wait() {
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
	}
}

// find waits for a line whose fields include want (as strings).
func (l *logLines) find(want map[string]string) (map[string]any, error) {
	deadline := time.After(20 * time.Second)
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			if matchLine(line, want) {
				l.mu.Unlock()
				return line, nil
			}
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-l.done:
			return nil, fmt.Errorf("demo: the server exited without logging %v", want)
		case <-deadline:
			return nil, fmt.Errorf("demo: the server did not log %v within 20s", want)
		}
	}
}

func matchLine(line map[string]any, want map[string]string) bool {
	for k, v := range want {
		if fmt.Sprint(line[k]) != v {
			return false
		}
	}
	return true
}

// requestLine waits for the server's record of request id.
func (l *logLines) requestLine(id string) (map[string]any, error) {
	return l.find(map[string]string{"msg": "request", "id": id})
}

// outcomeOf describes a request's logged terminal state: the outcome, and
// for a cancelled or timed-out one its cause.
func outcomeOf(line map[string]any) string {
	outcome := fmt.Sprint(line["outcome"])
	if cause, ok := line["cause"].(string); ok && cause != "" {
		return outcome + " (" + cause + ")"
	}
	return outcome
}

// framesFor keeps the frames that concern request id: its response and
// any progress under its token.
func framesFor(frames []labFrame, id, token string) (response *labFrame, progress int) {
	for i, f := range frames {
		switch {
		case f.idIs(id):
			response = &frames[i]
		case f.Method == "notifications/progress" && token != "" && strings.Contains(string(f.Params), fmt.Sprintf(`"progressToken":%q`, token)):
			progress++
		}
	}
	return response, progress
}
