package server

import (
	"context"
	"sync"
)

// shutdown is the server-wide shutdown's state.
type shutdown struct {
	once    sync.Once
	stopped chan struct{} // closed when Shutdown has finished
}

// Shutdown ends the server gracefully, on every transport attached to it:
// every session stops taking requests (they are refused as unavailable,
// 503 over HTTP), subscriptions are ended by the server, and calls in
// flight — running or waiting for admission — may finish until ctx ends;
// whatever is still in flight then is cancelled with ErrShutdown. Then
// every session is closed and Stopped's channel is closed, which the
// transports watch: a stdio connection's Serve returns, an HTTP handler
// ends its sessions. It returns ctx's error if calls had to be cancelled.
// Calling it again waits again, and changes nothing else.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	for _, ss := range s.sessionsSnapshot() {
		ss.drain()
	}
	var err error
	for _, ss := range s.sessionsSnapshot() {
		if werr := ss.Wait(ctx); werr != nil && err == nil {
			err = werr
		}
	}
	for _, ss := range s.sessionsSnapshot() {
		ss.Close(ErrShutdown)
	}
	s.down.once.Do(func() { close(s.down.stopped) })
	return err
}

// Draining reports whether Shutdown has begun: a transport refuses new
// connections and sessions from then on.
func (s *Server) Draining() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.draining
}

// Stopped returns a channel that is closed when Shutdown has finished and
// every session is closed. Transports end their connections then.
func (s *Server) Stopped() <-chan struct{} { return s.down.stopped }
