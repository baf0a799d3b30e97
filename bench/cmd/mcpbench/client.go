package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// client is a spawned server and our connection to it, over either
// transport. callEcho may be called from many goroutines.
type client interface {
	initialize() error // the legacy handshake
	callEcho() error
	pid() int
	stop()
}

// conn is one spawned server and the client side of its stdio connection.
// Requests may be sent from many goroutines; one reader goroutine hands each
// response to the caller waiting for its id.
type conn struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	meta  string // appended to every tools/call's params; empty in the legacy era

	wmu sync.Mutex // one request line per write

	mu      sync.Mutex
	pending map[int64]chan *message
	nextID  atomic.Int64

	done    chan struct{} // closed when the reader stops
	readErr error         // why it stopped; read only after done
	watch   *time.Timer   // kills a server that hangs the run
	killed  atomic.Bool   // by watch
}

// message is the part of a server message the benchmark looks at.
type message struct {
	ID     *int64 `json:"id"`
	Method string `json:"method"`
	Result *struct {
		ProtocolVersion string `json:"protocolVersion"`
		Content         []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (c *conn) pid() int { return c.cmd.Process.Pid }

// start spawns the server. Its stderr goes to stderrPath, or to /dev/null
// when that is empty, so request logging never fills an unread pipe.
func start(spec serverSpec, era, stderrPath string, timeout time.Duration) (*conn, error) {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive an interrupted run
	if stderrPath != "" {
		f, err := os.Create(stderrPath)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child has its own copy
		cmd.Stderr = f
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of our own rather than StdoutPipe, so that cmd.Wait does not
	// close it under the reader.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = w
	if err := orphans.Start(cmd); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	c := &conn{cmd: cmd, stdin: stdin, pending: map[int64]chan *message{}, done: make(chan struct{})}
	if era == "modern" {
		c.meta = modernMeta
	}
	c.watch = time.AfterFunc(timeout, func() { c.killed.Store(true); cmd.Process.Kill() })
	go c.read(r)
	return c, nil
}

// stop closes stdin, which asks a stdio server to exit, and kills it by PID
// if it is still running 2 s later.
func (c *conn) stop() {
	c.watch.Stop()
	c.stdin.Close()
	exited := make(chan struct{})
	go func() { c.cmd.Wait(); orphans.Untrack(c.cmd.Process.Pid); close(exited) }()
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		c.cmd.Process.Kill()
		<-exited
	}
	<-c.done
}

func (c *conn) read(r *os.File) {
	defer close(c.done)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		m := new(message)
		if err := json.Unmarshal(sc.Bytes(), m); err != nil {
			c.readErr = fmt.Errorf("bad line on server stdout: %v: %.200q", err, sc.Bytes())
			return
		}
		if m.Method != "" || m.ID == nil {
			continue // a notification or server request, not an answer to us
		}
		c.mu.Lock()
		ch := c.pending[*m.ID]
		delete(c.pending, *m.ID)
		c.mu.Unlock()
		if ch == nil {
			c.readErr = fmt.Errorf("response to unknown id %d", *m.ID)
			return
		}
		ch <- m
	}
	switch {
	case c.killed.Load():
		c.readErr = errors.New("server killed: run took longer than -timeout")
	case sc.Err() != nil:
		c.readErr = sc.Err()
	default:
		c.readErr = errors.New("server closed stdout (-stderr-dir keeps its stderr)")
	}
}

// roundTrip sends one request line carrying id and waits for its response.
func (c *conn) roundTrip(id int64, line []byte) (*message, error) {
	ch := make(chan *message, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	c.wmu.Lock()
	_, err := c.stdin.Write(line)
	c.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-c.done:
		return nil, c.readErr
	}
}

// initialize performs the legacy handshake.
func (c *conn) initialize() error {
	m, err := c.roundTrip(0, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"mcpbench","version":"1"}}}`+"\n", mcp.Version20251125))
	switch {
	case err != nil:
		return err
	case m.Error != nil:
		return fmt.Errorf("initialize: error %d %s", m.Error.Code, m.Error.Message)
	case m.Result == nil || m.Result.ProtocolVersion != mcp.Version20251125:
		return fmt.Errorf("initialize: did not settle on %s", mcp.Version20251125)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = io.WriteString(c.stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	return err
}

// modernMeta is appended to a tools/call's params in the modern era.
var modernMeta = fmt.Sprintf(`,"_meta":{%q:%q,%q:{}}`, mcp.MetaProtocolVersion, mcp.Version20260728, mcp.MetaClientCapabilities)

// echoRequest is one echo tools/call, its text unique per id so that a
// mixed-up response shows.
func echoRequest(id int64, meta string) (line []byte, text string) {
	text = "bench-" + strconv.FormatInt(id, 10)
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}%s}}`+"\n", id, text, meta), text
}

// checkEcho checks that m is a success result echoing text.
func checkEcho(id int64, text string, m *message) error {
	switch {
	case m.Error != nil:
		return fmt.Errorf("id %d: error %d %s", id, m.Error.Code, m.Error.Message)
	case m.Result == nil || m.Result.IsError || len(m.Result.Content) != 1 ||
		m.Result.Content[0].Type != "text" || m.Result.Content[0].Text != text:
		return fmt.Errorf("id %d: result is not one text block %q", id, text)
	}
	return nil
}

// callEcho makes one echo tools/call and checks that it echoed.
func (c *conn) callEcho() error {
	id := c.nextID.Add(1)
	line, text := echoRequest(id, c.meta)
	m, err := c.roundTrip(id, line)
	if err != nil {
		return err
	}
	return checkEcho(id, text, m)
}

// phase makes n echo calls from workers goroutines pulling from a shared
// counter (workers == 1 is the sequential phase) and returns each call's
// latency and the phase's wall time.
func phase(c client, n, workers int) (lat []time.Duration, wall time.Duration, errs int, firstErr error) {
	lat = make([]time.Duration, n)
	var next, nerr atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	t0 := time.Now()
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				t := time.Now()
				if err := c.callEcho(); err != nil {
					nerr.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				lat[i] = time.Since(t)
			}
		})
	}
	wg.Wait()
	return lat, time.Since(t0), int(nerr.Load()), firstErr
}
