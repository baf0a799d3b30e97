// Command relayfloor is the gateway's floor: the least a process between
// an MCP client and an MCP server can do. It understands nothing of MCP.
// Over stdio it starts the server's command line and copies bytes both
// ways; with -http it is a bare net/http handler that sends each request
// on to the server's URL and copies the answer back. What `mcprel
// gateway` adds to a call beyond what relayfloor adds is the gateway's own
// cost; what relayfloor adds is the price of a process in between on this
// machine, which no gateway avoids.
//
// Usage:
//
//	relayfloor COMMAND [ARG…]                        # stdio in front of stdio
//	relayfloor -http 127.0.0.1:0 -upstream URL       # HTTP in front of HTTP
//
// With -http it prints its endpoint URL on stdout, as floor does.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sync"
)

func main() {
	addr := flag.String("http", "", "serve HTTP on this address (e.g. 127.0.0.1:0) in front of -upstream, and print the endpoint URL on stdout")
	upstream := flag.String("upstream", "", "with -http, the server's Streamable HTTP endpoint")
	flag.Parse()
	var err error
	switch {
	case *addr != "" && *upstream != "":
		err = proxyHTTP(*addr, *upstream)
	case *addr == "" && *upstream == "" && flag.NArg() > 0:
		err = relayStdio(flag.Args())
	default:
		err = fmt.Errorf("want a command line, or -http ADDR with -upstream URL")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relayfloor:", err)
		os.Exit(2)
	}
}

// relayStdio starts argv and copies stdin to it and its stdout to stdout
// until either side closes.
func relayStdio(argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		io.Copy(in, os.Stdin)
		in.Close() // the client is gone: so is the server's input
	}()
	io.Copy(os.Stdout, out)
	return cmd.Wait()
}

// buffers keep the copy buffers of finished requests for the next ones:
// a floor allocates no more than it must.
var buffers = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// maxBody bounds a request read whole before it is sent on: mcpbench's
// calls are far smaller, and a floor has no business holding more.
const maxBody = 16 << 20

// hopByHop are the headers of one connection, which a relay does not
// pass on; every other header, the MCP ones included, goes on as it came.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// proxyHTTP serves addr in front of target: each request is read whole,
// sent on with its headers to target, and its answer copied back as it
// arrives, flushed after every read, as an event stream needs.
func proxyHTTP(addr, target string) error {
	if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-upstream %q is not an http:// or https:// URL with a host", target)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// As many kept connections as callers: the default of 2 would close
	// and reopen connections under load, which no gateway worth measuring
	// does.
	transport.MaxIdleConnsPerHost = 256
	hc := &http.Client{Transport: transport}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			status := http.StatusBadRequest
			if _, ok := err.(*http.MaxBytesError); ok {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "relayfloor: reading the request: "+err.Error(), status)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header = r.Header.Clone()
		for _, k := range hopByHop {
			out.Header.Del(k)
		}
		resp, err := hc.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		flusher, _ := w.(http.Flusher)
		bp := buffers.Get().(*[]byte)
		defer buffers.Put(bp)
		buf := *bp
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return // the client is gone; its request's context ends the upstream's
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
			if err != nil {
				return
			}
		}
	}))
}
