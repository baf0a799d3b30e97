package streamhttp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for ListenerOptions fields left at zero.
const (
	// DefaultMaxConns is the most connections a Listener holds, unless
	// the process's open-file limit calls for fewer (see ListenerOptions).
	DefaultMaxConns = 4096
	// shedLimit bounds the connections being turned away at once, each
	// held for at most shedLinger: past it, an excess connection is closed
	// without a word rather than hold a descriptor.
	shedLimit  = 256
	shedLinger = time.Second
)

// ListenerOptions bound the connections a Listener holds. The zero value
// is safe: DefaultMaxConns (or three quarters of the open-file limit, when
// that is lower, leaving descriptors for the database and the log), a
// quarter of them per remote address.
type ListenerOptions struct {
	// MaxConns caps the connections open at once.
	MaxConns int
	// MaxConnsPerHost caps those from one remote IP address, so that one
	// client cannot take them all.
	MaxConnsPerHost int
}

// LimitListener returns ln holding at most opts.MaxConns connections, and
// opts.MaxConnsPerHost from one address. A connection past either cap is
// answered at once with 503 Service Unavailable (Retry-After: 1) and
// closed, so that a flood of connections is refused well before the
// process runs out of file descriptors and can no longer accept anyone.
// Together with HandlerOptions' body deadlines and http.Server's
// ReadHeaderTimeout and IdleTimeout, no client holds a connection by
// being slow. opts may be nil.
func LimitListener(ln net.Listener, opts *ListenerOptions) *Listener {
	var o ListenerOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
		if fds := openFileLimit(); fds > 0 {
			o.MaxConns = max(1, min(o.MaxConns, fds*3/4))
		}
	}
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = max(1, o.MaxConns/4)
	}
	return &Listener{Listener: ln, opts: o, byHost: make(map[string]int)}
}

// Listener is a net.Listener with connection caps (see LimitListener).
type Listener struct {
	net.Listener
	opts     ListenerOptions
	mu       sync.Mutex
	open     int
	byHost   map[string]int
	shedding atomic.Int64
	shed     atomic.Int64
}

// Stats is what a Listener holds and has turned away.
type Stats struct {
	Open int   // connections open now
	Shed int64 // connections refused since the listener was made
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: l.open, Shed: l.shed.Load()}
}

// Accept returns the next connection within the caps, turning away the
// ones past them.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := remoteHost(c)
		l.mu.Lock()
		if l.open >= l.opts.MaxConns || l.byHost[host] >= l.opts.MaxConnsPerHost {
			l.mu.Unlock()
			l.turnAway(c)
			continue
		}
		l.open++
		l.byHost[host]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, release: func() { l.release(host) }}, nil
	}
}

func (l *Listener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byHost[host]--; l.byHost[host] <= 0 {
		delete(l.byHost, host)
	}
}

// overloadedResponse is what a connection past the caps reads.
var overloadedResponse = func() []byte {
	body := `{"jsonrpc":"2.0","error":{"code":-31001,"message":"too many connections; retry later",` +
		`"data":{"code":"overloaded","message":"too many connections","retryable":true,"retryAfterMs":1000}}}`
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}()

// turnAway answers a connection past the caps with 503 and closes it. It
// reads the request's head first — an HTTP client takes an answer that
// comes before its request for a broken connection — then half-closes and
// reads briefly, so that the unread rest of the request does not make the
// close a reset that discards the answer. All within shedLinger.
func (l *Listener) turnAway(c net.Conn) {
	l.shed.Add(1)
	if l.shedding.Add(1) > shedLimit {
		l.shedding.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer l.shedding.Add(-1)
		defer c.Close()
		c.SetDeadline(time.Now().Add(shedLinger))
		head := bufio.NewReaderSize(c, 4096)
		for {
			line, err := head.ReadSlice('\n')
			if err != nil {
				return // no request within the linger, or one too large to bother with
			}
			if len(bytes.TrimSpace(line)) == 0 {
				break // the blank line that ends the head
			}
		}
		if _, err := c.Write(overloadedResponse); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		io.Copy(io.Discard, c)
	}()
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func remoteHost(c net.Conn) string {
	addr := c.RemoteAddr()
	if addr == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}
