package host

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mcprel/mcprel/auth"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

// serveHTTP serves the endpoint on the listener New bound until ctx ends
// or the HTTP server fails, then runs the transport's steps of the
// shutdown: the server drains within the grace, the handler's sessions
// end, and the listener and idle connections close. It returns the HTTP
// server's failure, if that ended it.
func (rt *Runtime) serveHTTP(ctx context.Context) error {
	o := &rt.opts
	tcp, _ := rt.ln.Addr().(*net.TCPAddr)
	beyondLoopback := tcp != nil && !tcp.IP.IsLoopback()
	if beyondLoopback && o.authenticator() == nil {
		rt.logger.Warn("serving beyond loopback without --auth-token: anyone who can reach this address can call the tools", "addr", rt.ln.Addr().String())
	}
	if beyondLoopback {
		hosts, origins := "localhost, 127.0.0.1, ::1", "http(s)://localhost, 127.0.0.1 or [::1], any port"
		if len(o.HTTP.AllowedHosts) > 0 {
			hosts = strings.Join(o.HTTP.AllowedHosts, ", ")
		}
		if len(o.HTTP.AllowedOrigins) > 0 {
			origins = strings.Join(o.HTTP.AllowedOrigins, ", ")
		}
		rt.logger.Warn("the Host header must name an allowed host, or the request is refused with 403; add the names clients use with --allowed-host (and browser origins with --allowed-origin)",
			"allowed_hosts", hosts, "allowed_origins", origins)
	}
	mux := http.NewServeMux()
	mux.Handle(o.Path, rt.guard(rt.handler, o.authenticator(), true, streamhttp.Refuse))
	if o.Metrics.Path != "" {
		// Beside the endpoint, behind its Host and Origin checks and the
		// metrics' authenticator.
		mux.Handle(o.Metrics.Path, rt.guard(rt.metrics.Handler(), o.metricsAuthenticator(), true, nil))
		// The status page beside them, behind the same.
		sp := statusPath(o.Metrics.Path)
		mux.Handle(sp, rt.pageGuard(rt.guard(rt.status.HTML(), o.metricsAuthenticator(), true, nil), false))
		mux.Handle(sp+".json", rt.pageGuard(rt.guard(rt.status.JSON(), o.metricsAuthenticator(), true, nil), false))
	}
	if rt.oauth != nil {
		// The metadata is how a client without a token finds where to get
		// one: served to anyone, from any origin and any Host name.
		for _, path := range rt.oauth.MetadataPaths(o.Path) {
			if _, taken := o.Handlers[path]; !taken {
				mux.Handle(path, rt.oauth.MetadataHandler())
			}
		}
	}
	for path, h := range o.Handlers {
		mux.Handle(path, rt.guard(h, o.authenticator(), true, nil))
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(rt.logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(rt.ln) }()
	// A failed HTTP server (its listener gone) still has calls running on
	// the connections it accepted: they drain as in a shutdown, before the
	// store closes under them.
	var failed error
	select {
	case failed = <-served:
	case <-ctx.Done():
	}
	rt.logger.Info("shutting down", "grace", o.ShutdownGrace)
	rt.step(stepDrain)
	gctx, cancel := context.WithTimeout(context.Background(), o.ShutdownGrace)
	defer cancel()
	rt.srv.Shutdown(gctx)
	rt.handler.Shutdown(gctx) // the handler's own sessions and streams, now idle
	rt.step(stepCloseTransport)
	// Every stream has ended; close the listener and idle connections.
	sctx, cancel2 := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel2()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	if failed != nil {
		return failed
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveMetrics serves the metrics at /metrics on their own listener (a
// stdio server has no other), and the status page at /status and
// /status.json. With credentials, a scrape must carry one
// of them. Beyond loopback it warns when there are none: anyone who can
// reach it reads them.
func (rt *Runtime) serveMetrics() *http.Server {
	a := rt.opts.metricsAuthenticator()
	if tcp, ok := rt.metricsLn.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && a == nil {
		rt.logger.Warn("serving metrics beyond loopback without a token: anyone who can reach this address can read them", "addr", rt.metricsLn.Addr().String())
	}
	mux := http.NewServeMux()
	// The metrics' own listener has no Host check: scrapers name it by
	// whatever address they reach it at.
	mux.Handle("/metrics", rt.guard(rt.metrics.Handler(), a, false, nil))
	// The status page beside them, behind the same.
	mux.Handle("/status", rt.pageGuard(rt.guard(rt.status.HTML(), a, false, nil), true))
	mux.Handle("/status.json", rt.pageGuard(rt.guard(rt.status.JSON(), a, false, nil), true))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(rt.metricsLn)
	return hs
}

// guard is the one place the runtime installs its HTTP middleware on a
// handler it serves: with hosts, the Host and Origin checks of
// Options.HTTP (auth.Hosts); with a, authentication (auth.Require), the
// caller's auth.Principal then in the request's context. refuse writes a
// refusal; nil writes it as text. Every listener's handlers are wrapped
// here, once, when the listener starts.
func (rt *Runtime) guard(next http.Handler, a auth.Authenticator, hosts bool, refuse auth.Refuse) http.Handler {
	if a != nil {
		next = auth.Require(next, a, refuse)
	}
	if hosts {
		next = auth.Hosts{Allowed: rt.opts.HTTP.AllowedHosts, Origins: rt.opts.HTTP.AllowedOrigins}.Wrap(next, refuse)
	}
	return next
}

// endpointURL is the URL clients reach the endpoint at. An unspecified
// address (0.0.0.0, which Go listens on as the dual-stack [::]) accepts
// connections on every interface but is no host to connect to, and a Host
// header naming it would be refused: loopback stands in.
func endpointURL(tcp *net.TCPAddr, addr, path string) string {
	if tcp == nil {
		return "http://" + addr + path
	}
	ip := tcp.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port)) + path
}
