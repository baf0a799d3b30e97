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

// httpConn is one spawned server serving Streamable HTTP, and one pooled
// client for it.
type httpConn struct {
	cmd     *exec.Cmd
	url     string
	hc      *http.Client
	modern  bool
	session string // Mcp-Session-Id, legacy era; set by initialize
	nextID  atomic.Int64
	dials   atomic.Int64 // TCP connections opened: shows whether the pool is reused

	exited chan struct{} // closed when the process has been reaped
	tmpLog string        // the server's output file, when it is ours to remove
	watch  *time.Timer   // kills a server that hangs the run
}

func (c *httpConn) pid() int { return c.cmd.Process.Pid }

// startHTTP spawns the server and waits for its endpoint URL: the first
// line starting with http:// on its stdout or stderr. Both go to one file,
// stderrPath or a temporary one, rather than a pipe, so that a server's
// request logging costs us nothing to read while measuring.
func startHTTP(spec serverSpec, era, stderrPath string, timeout time.Duration) (*httpConn, error) {
	c := &httpConn{modern: era == "modern", exited: make(chan struct{})}
	var out *os.File
	var err error
	if stderrPath != "" {
		out, err = os.Create(stderrPath)
	} else {
		out, err = os.CreateTemp("", "mcpbench-*.log")
	}
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	if stderrPath == "" {
		c.tmpLog = out.Name()
	}
	c.cmd = exec.Command(spec.Argv[0], spec.Argv[1:]...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive an interrupted run
	c.cmd.Stdout, c.cmd.Stderr = out, out
	if err := c.cmd.Start(); err != nil {
		os.Remove(c.tmpLog)
		return nil, err
	}
	go func() { c.cmd.Wait(); close(c.exited) }()
	c.watch = time.AfterFunc(timeout, func() { c.cmd.Process.Kill() })

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	for c.url == "" {
		select {
		case <-tick.C:
			b, _ := os.ReadFile(out.Name())
			for line := range strings.Lines(string(b)) {
				if strings.HasPrefix(line, "http://") && strings.HasSuffix(line, "\n") {
					c.url = strings.TrimSpace(line)
					break
				}
			}
		case <-c.exited:
			c.stop()
			return nil, errors.New("server exited before printing its URL (-stderr-dir keeps its output)")
		case <-giveUp:
			c.stop()
			return nil, errors.New("server printed no http:// URL within 10 s")
		}
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

// stop ends the legacy session, closes our connections and asks the server
// to exit (SIGTERM), killing it if it has not 2 s later.
func (c *httpConn) stop() {
	c.watch.Stop()
	if c.hc != nil {
		if c.session != "" {
			if req, err := http.NewRequest(http.MethodDelete, c.url, nil); err == nil {
				c.setHeaders(req, "", "")
				if resp, err := c.hc.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}
		c.hc.CloseIdleConnections()
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
	if c.tmpLog != "" {
		os.Remove(c.tmpLog)
	}
}

// setHeaders sets what every request of the era needs. method and name are
// the Mcp-Method and Mcp-Name routing headers (modern era only).
func (c *httpConn) setHeaders(req *http.Request, method, name string) {
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	switch {
	case c.modern:
		h.Set(mcp.HeaderProtocolVersion, mcp.Version20260728)
		h.Set(mcp.HeaderMethod, method)
		if name != "" {
			h.Set(mcp.HeaderName, name)
		}
	case c.session != "":
		h.Set(mcp.HeaderSessionID, c.session)
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
	if c.session = resp.Header.Get(mcp.HeaderSessionID); c.session == "" {
		return errors.New("initialize: no Mcp-Session-Id header")
	}
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
