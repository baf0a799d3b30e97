package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// proc is a spawned process whose stdout and stderr both go to one file,
// not a pipe, so that its logging costs us nothing to read while
// measuring: an HTTP server, or a sidecar.
type proc struct {
	cmd    *exec.Cmd
	out    string        // the output file's path
	tmpLog bool          // out is ours to remove
	exited chan struct{} // closed when the process has been reaped
	watch  *time.Timer   // kills a process that hangs the run
}

// startProc spawns argv with its output in outPath, or in a temporary file
// when that is empty.
func startProc(argv []string, outPath string, timeout time.Duration) (*proc, error) {
	p := &proc{exited: make(chan struct{})}
	var out *os.File
	var err error
	if outPath != "" {
		out, err = os.Create(outPath)
	} else {
		out, err = os.CreateTemp("", "mcpbench-*.log")
		p.tmpLog = true
	}
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	p.out = out.Name()
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive an interrupted run
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := orphans.Start(p.cmd); err != nil {
		p.removeLog()
		return nil, err
	}
	go func() { p.cmd.Wait(); orphans.Untrack(p.pid()); close(p.exited) }()
	p.watch = time.AfterFunc(timeout, func() { p.cmd.Process.Kill() })
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop asks the process to exit (SIGTERM) and kills it if it has not 2 s
// later.
func (p *proc) stop() {
	p.watch.Stop()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.removeLog()
}

func (p *proc) removeLog() {
	if p.tmpLog {
		os.Remove(p.out)
	}
}

// waitURL returns the endpoint URL: the spec's, once its port accepts
// connections, or else the first line starting with http:// in the
// process's output. Either wait is bounded by 10 s.
func (p *proc) waitURL(spec serverSpec) (string, error) {
	if spec.URL != "" {
		return spec.URL, waitAccepting(hostPort(spec.URL), p.exited)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	for {
		select {
		case <-tick.C:
			b, _ := os.ReadFile(p.out)
			for line := range strings.Lines(string(b)) {
				if strings.HasPrefix(line, "http://") && strings.HasSuffix(line, "\n") {
					return strings.TrimSpace(line), nil
				}
			}
		case <-p.exited:
			return "", errors.New("server exited before printing its URL (-stderr-dir keeps its output)")
		case <-giveUp:
			return "", errors.New("server printed no http:// URL within 10 s (name it in the spec: name=URL@command)")
		}
	}
}

// httpConn is one spawned server serving Streamable HTTP, and one pooled
// client for it.
type httpConn struct {
	*proc
	url     string
	hc      *http.Client
	bearer  string // the Authorization header's token, if any
	modern  bool
	session string // Mcp-Session-Id, legacy era; set by initialize
	// initialized is set once the legacy handshake is over, session or not.
	initialized bool
	nextID      atomic.Int64
	dials       atomic.Int64 // TCP connections opened: shows whether the pool is reused
}

// startHTTP spawns the server and waits for its endpoint URL (see
// proc.waitURL). Its stdout and stderr go to stderrPath, or a temporary
// file.
func startHTTP(spec serverSpec, era, stderrPath string, timeout time.Duration) (*httpConn, error) {
	p, err := startProc(spec.Argv, stderrPath, timeout)
	if err != nil {
		return nil, err
	}
	c := &httpConn{proc: p, modern: era == "modern", bearer: spec.bearer}
	if c.url, err = p.waitURL(spec); err != nil {
		p.stop()
		return nil, err
	}
	// One client per server, its pool big enough that the concurrent
	// phase reuses connections rather than dialling per call.
	var d net.Dialer
	c.hc = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c.dials.Add(1)
				return d.DialContext(ctx, network, addr)
			},
			MaxIdleConns:        128,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
	return c, nil
}

// stop ends the legacy session, closes our connections and stops the
// server.
func (c *httpConn) stop() {
	if c.session != "" {
		if req, err := http.NewRequest(http.MethodDelete, c.url, nil); err == nil {
			c.setHeaders(req, "", "")
			if resp, err := c.hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	c.hc.CloseIdleConnections()
	c.proc.stop()
}

// setHeaders sets what every request of the era needs. method and name are
// the Mcp-Method and Mcp-Name routing headers (modern era only).
func (c *httpConn) setHeaders(req *http.Request, method, name string) {
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if c.bearer != "" {
		h.Set("Authorization", "Bearer "+c.bearer)
	}
	switch {
	case c.modern:
		h.Set(mcp.HeaderProtocolVersion, mcp.Version20260728)
		h.Set(mcp.HeaderMethod, method)
		if name != "" {
			h.Set(mcp.HeaderName, name)
		}
	case c.initialized:
		if c.session != "" {
			h.Set(mcp.HeaderSessionID, c.session)
		}
		h.Set(mcp.HeaderProtocolVersion, mcp.Version20251125)
	}
}

// post sends one JSON-RPC message and returns the HTTP response.
func (c *httpConn) post(body []byte, method, name string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	c.setHeaders(req, method, name)
	return c.hc.Do(req)
}

// initialize performs the legacy handshake and keeps the session id.
func (c *httpConn) initialize() error {
	resp, err := c.post(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"mcpbench","version":"1"}}}`, mcp.Version20251125), "initialize", "")
	if err != nil {
		return err
	}
	m, err := readResponse(resp, 0)
	switch {
	case err != nil:
		return fmt.Errorf("initialize: %w", err)
	case m.Error != nil:
		return fmt.Errorf("initialize: error %d %s", m.Error.Code, m.Error.Message)
	case m.Result == nil || m.Result.ProtocolVersion != mcp.Version20251125:
		return fmt.Errorf("initialize: did not settle on %s", mcp.Version20251125)
	}
	// A server may keep no session (supergateway's stateless mode): then
	// requests carry only the protocol version.
	c.session = resp.Header.Get(mcp.HeaderSessionID)
	c.initialized = true
	resp, err = c.post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), "notifications/initialized", "")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("notifications/initialized: HTTP %s", resp.Status)
	}
	return nil
}

// callEcho makes one echo tools/call and checks that it echoed.
func (c *httpConn) callEcho() error {
	id := c.nextID.Add(1)
	meta := ""
	if c.modern {
		meta = modernMeta
	}
	body, text := echoRequest(id, meta)
	resp, err := c.post(body, "tools/call", "echo")
	if err != nil {
		return err
	}
	m, err := readResponse(resp, id)
	if err != nil {
		return fmt.Errorf("id %d: %w", id, err)
	}
	return checkEcho(id, text, m)
}

// readResponse reads the response to request id from a JSON body or an SSE
// stream, then the rest of the body, so the connection goes back to the
// pool.
func readResponse(resp *http.Response, id int64) (*message, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, fmt.Errorf("HTTP %s: %q", resp.Status, b)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var m *message
	var err error
	switch mt {
	case "application/json":
		m = new(message)
		err = json.NewDecoder(resp.Body).Decode(m)
		if err == nil && (m.ID == nil || *m.ID != id) {
			err = errors.New("JSON body is not the response to this request")
		}
	case "text/event-stream":
		m, err = readSSE(resp.Body, id)
	default:
		err = fmt.Errorf("unexpected Content-Type %q", resp.Header.Get("Content-Type"))
	}
	if err != nil {
		return nil, err
	}
	// The stream ends after the response; reading to its end lets the
	// client reuse the connection.
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return nil, err
	}
	return m, nil
}

// readSSE returns the response to id from an SSE stream, skipping comments,
// notifications and events without data.
func readSSE(r io.Reader, id int64) (*message, error) {
	br := bufio.NewReaderSize(r, 64<<10) // a longer line is an error
	var data []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, fmt.Errorf("SSE stream ended without the response: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n') // data lines of one event join with newlines
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
			continue
		}
		if len(line) != 0 || len(data) == 0 {
			continue // event:, id:, retry: or a comment; or an empty event
		}
		m := new(message)
		if err := json.Unmarshal(data, m); err != nil {
			return nil, fmt.Errorf("bad SSE data: %v: %.200q", err, data)
		}
		data = data[:0]
		if m.Method == "" && m.ID != nil && *m.ID == id {
			return m, nil
		}
	}
}
