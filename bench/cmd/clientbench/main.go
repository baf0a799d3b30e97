// Command clientbench measures what mcprel's client (package client)
// costs the process that calls: client CPU per echo call against one
// `mcprel serve`, over stdio or Streamable HTTP, beside a raw driver — the
// least a client can do: write the request, read the line or body, match
// the id — and the go-sdk, mcp-go and TypeScript SDK clients, in the same
// run. The drivers take turns, runs times, each making n
// sequential calls and then n calls from conc goroutines; reported are
// calls/s and this process's CPU per call (user+system), and their ratio.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/bench/internal/machine"
	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

func main() {
	server := flag.String("server", "mcprel serve --stdio --log-level warn", "the server command line; with -http it must print its URL")
	useHTTP := flag.Bool("http", false, "speak Streamable HTTP to the server instead of stdio (each driver in its era: raw and client 2026-07-28, go-sdk, mcp-go and ts-v1 2025-11-25)")
	n := flag.Int("n", 10000, "calls per phase")
	conc := flag.Int("conc", 16, "goroutines in the concurrent phase")
	runs := flag.Int("runs", 3, "runs; the drivers take turns within each")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	only := flag.String("drivers", "raw,client,go-sdk,mcp-go", "the drivers to measure, comma-separated: raw, client (mcprel's, the newest era the server speaks), client-2025 and client-2026 (mcprel's, pinned to an era), go-sdk, mcp-go, ts-v1 and ts-v2 (the TypeScript SDK clients; see -ts)")
	flag.StringVar(&tsDir, "ts", "peers/ts-client", "the directory of calls.mjs with its node_modules (npm ci there), for the ts-v1 and ts-v2 drivers")
	flag.Parse()
	chosen := strings.Split(*only, ",")
	for _, d := range chosen {
		if _, ok := drivers[d]; !ok {
			fmt.Fprintf(os.Stderr, "clientbench: unknown driver %q in -drivers\n", d)
			os.Exit(2)
		}
	}
	if !slices.Contains(chosen, "client") {
		fmt.Fprintln(os.Stderr, "clientbench: -drivers must include client: the others are compared with it")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "clientbench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	words := strings.Fields(*server)
	var results = map[string][]phase{}
	for run := range *runs {
		for _, d := range chosen {
			p, err := measure(d, words, *useHTTP, *n, *conc)
			if err != nil {
				fmt.Fprintln(os.Stderr, "clientbench:", err)
				pprof.StopCPUProfile()
				os.Exit(1)
			}
			fmt.Printf("run %d %-11s seq %7.0f/s %6.1f µs/call   conc %7.0f/s %6.1f µs/call\n", run+1, d, p.seqRate, p.seqCPU, p.concRate, p.concCPU)
			results[d] = append(results[d], p)
		}
	}
	med := func(d string, f func(phase) float64) float64 {
		v := []float64{}
		for _, p := range results[d] {
			v = append(v, f(p))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	transport := "stdio"
	if *useHTTP {
		transport = "Streamable HTTP"
	}
	fmt.Printf("\n%s, n=%d, conc=%d, median of %d runs: client CPU µs/call (calls/s)\n", transport, *n, *conc, *runs)
	for _, d := range chosen {
		fmt.Printf("  %-11s  sequential %6.1f (%7.0f/s)   concurrent %6.1f (%7.0f/s)\n", d,
			med(d, func(p phase) float64 { return p.seqCPU }), med(d, func(p phase) float64 { return p.seqRate }),
			med(d, func(p phase) float64 { return p.concCPU }), med(d, func(p phase) float64 { return p.concRate }))
	}
	fmt.Println("  ratios to client (mcprel's), calls/s and CPU per call:")
	for _, d := range chosen {
		if d == "client" {
			continue
		}
		fmt.Printf("  %-11s  rate sequential %.2f× concurrent %.2f×   CPU sequential %.2f× concurrent %.2f×\n", d,
			med(d, func(p phase) float64 { return p.seqRate })/med("client", func(p phase) float64 { return p.seqRate }),
			med(d, func(p phase) float64 { return p.concRate })/med("client", func(p phase) float64 { return p.concRate }),
			med(d, func(p phase) float64 { return p.seqCPU })/med("client", func(p phase) float64 { return p.seqCPU }),
			med(d, func(p phase) float64 { return p.concCPU })/med("client", func(p phase) float64 { return p.concCPU }))
	}
}

type phase struct{ seqRate, seqCPU, concRate, concCPU float64 }

// caller makes one echo call.
type caller func(i int) error

func measure(driver string, server []string, useHTTP bool, n, conc int) (phase, error) {
	if strings.HasPrefix(driver, "ts-") {
		return measureTS(strings.TrimPrefix(driver, "ts-"), server, useHTTP, n, conc)
	}
	var call caller
	var stop func()
	var err error
	switch driver {
	case "client", "client-2025", "client-2026":
		call, stop, err = mcprelCaller(server, useHTTP, drivers[driver])
	case "go-sdk":
		call, stop, err = goSDKCaller(server, useHTTP)
	case "mcp-go":
		call, stop, err = mcpGoCaller(server, useHTTP)
	case "raw":
		if useHTTP {
			call, stop, err = rawHTTP(server)
		} else {
			call, stop, err = rawStdio(server)
		}
	}
	if err != nil {
		return phase{}, err
	}
	defer stop()
	for i := range 200 { // warm up
		if err := call(-1 - i); err != nil {
			return phase{}, err
		}
	}
	var p phase
	cpu0, t0 := machine.SelfCPU(), time.Now()
	for i := range n {
		if err := call(i); err != nil {
			return p, err
		}
	}
	p.seqRate = float64(n) / time.Since(t0).Seconds()
	p.seqCPU = float64((machine.SelfCPU() - cpu0).Microseconds()) / float64(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	cpu0, t0 = machine.SelfCPU(), time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if err := call(n + i); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return p, err
	}
	p.concRate = float64(n) / time.Since(t0).Seconds()
	p.concCPU = float64((machine.SelfCPU() - cpu0).Microseconds()) / float64(n)
	return p, nil
}

func clientCaller(c *client.Client) caller {
	return func(i int) error {
		text := fmt.Sprint("call ", i)
		res, err := c.CallTool(context.Background(), "echo", map[string]any{"text": text}, nil)
		if err != nil {
			return err
		}
		if len(res.Content) != 1 {
			return fmt.Errorf("echo answered %d blocks", len(res.Content))
		}
		return nil
	}
}

// modernMeta is the _meta of every raw 2026-07-28 request.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

func echoRequest(id int, text string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q},%s}}`, id, text, modernMeta)
}

// rawStdio is the least a stdio client can do: one reader goroutine hands
// each response line to its caller by id.
func rawStdio(server []string) (caller, func(), error) {
	cmd := exec.Command(server[0], server[1:]...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	waiting := map[int]chan []byte{}
	go func() {
		r := bufio.NewReaderSize(out, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var m struct{ ID int }
			json.Unmarshal(line, &m)
			mu.Lock()
			ch := waiting[m.ID]
			delete(waiting, m.ID)
			mu.Unlock()
			if ch != nil {
				ch <- line
			}
		}
	}()
	var wmu sync.Mutex
	var next atomic.Int64
	call := func(i int) error {
		id := int(next.Add(1))
		ch := make(chan []byte, 1)
		mu.Lock()
		waiting[id] = ch
		mu.Unlock()
		wmu.Lock()
		_, err := in.Write(append(echoRequest(id, fmt.Sprint("call ", i)), '\n'))
		wmu.Unlock()
		if err != nil {
			return err
		}
		select {
		case line := <-ch:
			if !bytes.Contains(line, []byte(`"result"`)) {
				return fmt.Errorf("echo failed: %s", line)
			}
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("no answer to %d", id)
		}
	}
	return call, func() { in.Close(); cmd.Wait() }, nil
}

// rawHTTP is the least an HTTP client can do: POST, read the body.
func rawHTTP(server []string) (caller, func(), error) {
	url, kill, err := startHTTP(server)
	if err != nil {
		return nil, nil, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var next atomic.Int64
	call := func(i int) error {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(echoRequest(int(next.Add(1)), fmt.Sprint("call ", i))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "echo")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Contains(body, []byte(`"result"`)) {
			return fmt.Errorf("echo failed: %v %s", err, body)
		}
		return nil
	}
	return call, func() { hc.CloseIdleConnections(); kill() }, nil
}

// startHTTP runs the server and reads its URL from its stdout or stderr.
func startHTTP(server []string) (string, func(), error) {
	cmd := exec.Command(server[0], server[1:]...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	kill := func() { cmd.Process.Kill(); cmd.Wait(); pw.Close() }
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "http://") {
			go io.Copy(io.Discard, pr)
			return l, kill, nil
		}
	}
	kill()
	return "", nil, fmt.Errorf("%s printed no URL", server[0])
}

// tsDir holds calls.mjs and the TypeScript SDKs it imports.
var tsDir string

// measureTS runs the TypeScript SDK client (sdk "v1" or "v2") in its own
// Node process, which makes the same calls as measure and reports its own
// calls/s and CPU per call. Over stdio the Node process starts the server;
// over HTTP this process does, and hands the Node process its URL. Node's
// warnings are off: the v2 client's requests pile abort listeners onto one
// signal, and printing a warning for each would be charged to the client.
func measureTS(sdk string, server []string, useHTTP bool, n, conc int) (phase, error) {
	target := server
	if useHTTP {
		url, kill, err := startHTTP(server)
		if err != nil {
			return phase{}, err
		}
		defer kill()
		target = []string{url}
	}
	args := append([]string{"--no-warnings", "calls.mjs", sdk, fmt.Sprint(n), fmt.Sprint(conc)}, target...)
	cmd := exec.Command("node", args...)
	cmd.Dir = tsDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return phase{}, fmt.Errorf("node calls.mjs %s in %s (npm ci there first): %v: %s", sdk, tsDir, err, stderr.Bytes())
	}
	var p struct{ SeqRate, SeqCPU, ConcRate, ConcCPU float64 }
	if err := json.Unmarshal(out, &p); err != nil {
		return phase{}, fmt.Errorf("node calls.mjs %s printed %q: %v", sdk, out, err)
	}
	return phase{seqRate: p.SeqRate, seqCPU: p.SeqCPU, concRate: p.ConcRate, concCPU: p.ConcCPU}, nil
}

// drivers are the drivers -drivers may name; for package client's, the
// era it is pinned to (0: negotiated).
var drivers = map[string]mcp.Era{
	"raw": 0, "client": 0, "client-2025": mcp.Legacy, "client-2026": mcp.Modern,
	"go-sdk": 0, "mcp-go": 0, "ts-v1": 0, "ts-v2": 0,
}

// mcprelCaller is package client on one connection to the server, in era
// (0: negotiated).
func mcprelCaller(server []string, useHTTP bool, era mcp.Era) (caller, func(), error) {
	opts := &client.Options{Era: era}
	if !useHTTP {
		c, err := client.DialStdio(context.Background(), server, opts)
		if err != nil {
			return nil, nil, err
		}
		return clientCaller(c), func() { c.Close() }, nil
	}
	url, kill, err := startHTTP(server)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.DialHTTP(context.Background(), url, opts)
	if err != nil {
		kill()
		return nil, nil, err
	}
	return clientCaller(c), func() { c.Close(); kill() }, nil
}
