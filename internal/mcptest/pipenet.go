package mcptest

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// PipeNetwork is an in-memory network: every dial is accepted as the other
// end of a net.Pipe, so an HTTP client and server both run inside a
// synctest bubble, on fake time. Serve an http.Server on it, and give the
// client Client().
type PipeNetwork struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// NewPipeNetwork returns an open network.
func NewPipeNetwork() *PipeNetwork {
	return &PipeNetwork{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept implements net.Listener.
func (n *PipeNetwork) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: no more dials are accepted.
func (n *PipeNetwork) Close() error { n.once.Do(func() { close(n.done) }); return nil }

// Addr implements net.Listener.
func (n *PipeNetwork) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

// DialContext connects to the network's listener.
func (n *PipeNetwork) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, srv := net.Pipe()
	select {
	case n.conns <- srv:
		return client, nil
	case <-n.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Client returns an HTTP client that dials this network, whatever the URL.
func (n *PipeNetwork) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: n.DialContext}}
}
