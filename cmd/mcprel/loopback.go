package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/mcprel/mcprel/internal/argv"
)

// callbackPath is the path of the loopback redirect URI.
const callbackPath = "/callback"

// receiver is the loopback end of a sign-in (RFC 8252 section 7.3): the
// redirect URI http://127.0.0.1:PORT/callback, on a port the system
// picks. It listens from the start, so that the URI can be registered
// and sent, and serves only while a sign-in waits for its redirect:
// exactly one callback is taken, its full URL handed to client/oauth
// (which checks its state, iss and error), and the browser is shown a
// short page. Anything later is told the link was already used.
type receiver struct {
	addr string // 127.0.0.1:PORT
	url  string // the redirect URI

	mu   sync.Mutex
	ln   net.Listener // nil between sign-ins once the first is over
	used bool         // a callback was taken in this sign-in
	got  chan string  // the callback's URL, for wait
}

// listenLoopback opens the receiver's port: the port of prefer, a
// redirect URI registered before, when it is free (an authorization
// server may hold a client to the URIs it registered exactly), else one
// the system picks.
func listenLoopback(prefer string) (*receiver, error) {
	var ln net.Listener
	if u, err := url.Parse(prefer); err == nil && u.Scheme == "http" && u.Hostname() == "127.0.0.1" && u.Port() != "" && u.Path == callbackPath {
		ln, _ = net.Listen("tcp", u.Host)
	}
	var err error
	if ln == nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("listening for the sign-in's redirect on 127.0.0.1: %w", err)
	}
	addr := ln.Addr().String()
	return &receiver{addr: addr, url: "http://" + addr + callbackPath, ln: ln}, nil
}

// Bounds of the receiver's HTTP server: a callback is one short GET.
const (
	callbackHeaderBytes = 16 << 10
	callbackIO          = 10 * time.Second
	callbackShutdown    = 2 * time.Second
)

// wait serves the redirect URI until a callback comes or ctx ends, and
// returns the callback's full URL. The port is closed when it returns;
// a later sign-in of the same run opens it again.
func (r *receiver) wait(ctx context.Context) (string, error) {
	r.mu.Lock()
	ln := r.ln
	r.ln, r.used, r.got = nil, false, make(chan string, 1)
	got := r.got
	r.mu.Unlock()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", r.addr); err != nil {
			return "", fmt.Errorf("listening again at %s for the redirect: %w", r.url, err)
		}
	}
	srv := &http.Server{
		Handler:           r,
		ReadHeaderTimeout: callbackIO,
		ReadTimeout:       callbackIO,
		WriteTimeout:      callbackIO,
		IdleTimeout:       callbackIO,
		MaxHeaderBytes:    callbackHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go srv.Serve(ln)
	defer func() {
		// The page of the callback taken is written before the port
		// closes; a slow browser gets callbackShutdown.
		sctx, cancel := context.WithTimeout(context.Background(), callbackShutdown)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}()
	select {
	case u := <-got:
		return u, nil
	case <-ctx.Done():
		why := context.Cause(ctx)
		if errors.Is(why, context.DeadlineExceeded) {
			return "", fmt.Errorf("no redirect came to %s in time", r.url)
		}
		return "", fmt.Errorf("stopped waiting for the redirect to %s: %w", r.url, why)
	}
}

// ServeHTTP takes the first GET of the callback path and answers every
// request with a page that says what became of it.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != callbackPath {
		page(w, http.StatusNotFound, "Not found", "This is mcprel's sign-in redirect; nothing else is here.")
		return
	}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		page(w, http.StatusMethodNotAllowed, "Method not allowed", "The sign-in redirect is a GET.")
		return
	}
	r.mu.Lock()
	first := !r.used && r.got != nil
	r.used = true
	got := r.got
	r.mu.Unlock()
	if !first {
		page(w, http.StatusConflict, "Already used",
			"This sign-in redirect was already used: mcprel takes the first one it is given and ignores the others. Return to the terminal.")
		return
	}
	q := req.URL.Query()
	if e := q.Get("error"); e != "" {
		why := printableText(e, 64)
		if d := printableText(q.Get("error_description"), 200); d != "" {
			why += " (" + d + ")"
		}
		page(w, http.StatusOK, "Sign-in refused",
			"The authorization server answered "+why+". mcprel's sign-in failed; return to the terminal.")
	} else {
		page(w, http.StatusOK, "Authorization received",
			"mcprel received the authorization response. You can close this tab: the terminal says whether the sign-in completed.")
	}
	got <- "http://" + r.addr + req.URL.RequestURI()
}

// close releases the port, if a sign-in did not already.
func (r *receiver) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
}

// page writes a short HTML page. The callback's URL holds the code: no
// page of this origin sends it on as a Referer, and none is cached.
func page(w http.ResponseWriter, status int, title, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>mcprel: %[1]s</title></head>\n<body><h1>%[1]s</h1><p>%[2]s</p></body></html>\n",
		html.EscapeString(title), html.EscapeString(text))
}

// printableText is at most max printable ASCII characters of s.
func printableText(s string, max int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < max; i++ {
		if s[i] >= 0x20 && s[i] < 0x7f {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// browserCommand is the command that opens a URL: $BROWSER, split into
// words without a shell (the URL is added as its last argument), else the
// platform's opener.
func browserCommand() ([]string, error) {
	if b := strings.TrimSpace(os.Getenv("BROWSER")); b != "" {
		words, err := argv.Split(b)
		if err != nil {
			return nil, fmt.Errorf("$BROWSER: %w", err)
		}
		if len(words) > 0 {
			return words, nil
		}
	}
	switch runtime.GOOS {
	case "darwin":
		return []string{"open"}, nil
	case "windows":
		return []string{"rundll32", "url.dll,FileProtocolHandler"}, nil
	}
	return []string{"xdg-open"}, nil
}

// maxOpenerOutput bounds what an opener's stderr may add to mcprel's.
const maxOpenerOutput = 4 << 10

// openBrowser starts the browser on u and does not wait for it: a browser
// may run for as long as the user keeps it. It gets no file of mcprel's
// own, so a caller reading mcprel's output is not kept waiting by the
// browser after mcprel exits; its stderr is passed on, up to
// maxOpenerOutput bytes.
func openBrowser(u string, stderr io.Writer) (string, error) {
	words, err := browserCommand()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(words[0], append(words[1:], u)...)
	cmd.Stderr = &limitedWriter{w: stderr, left: maxOpenerOutput}
	if err := cmd.Start(); err != nil {
		return words[0], err
	}
	go cmd.Wait()
	return words[0], nil
}

// limitedWriter passes on the first left bytes and drops the rest; it is
// no *os.File, so a child writing to it gets a pipe.
type limitedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := min(len(p), l.left); n > 0 {
		l.left -= n
		l.w.Write(p[:n])
	}
	return len(p), nil
}
