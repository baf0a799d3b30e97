// Command flowbench measures mcprel's flow control under pressure, in one
// process over loopback HTTP (2026-07-28 requests):
//
//	flowbench -mode slow     slow consumers: every stream's tool reports
//	                         progress as fast as it can while its client
//	                         reads a trickle; reports peak heap and RSS.
//	flowbench -mode goodput  admission at twice the admitted capacity:
//	                         goodput against capacity measured in the same
//	                         run, and whether every refusal says when to
//	                         retry.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server"
	"github.com/mcprel/mcprel/transport/streamhttp"
)

func main() {
	mode := flag.String("mode", "slow", "slow or goodput")
	streams := flag.String("streams", "1,100", "slow: comma-separated stream counts to run")
	reports := flag.Int("reports", 1_000_000, "slow: progress reports per stream")
	interval := flag.Duration("interval", server.DefaultProgressInterval, "slow: server progress interval (1ns: no rate limit, every report reaches the outbox)")
	capacity := flag.Int("capacity", streamhttp.DefaultStreamCapacity, "slow: messages one response stream may buffer")
	trickle := flag.Int("trickle", 512, "slow: bytes a client reads every 10 ms")
	conc := flag.Int("concurrency", 8, "goodput: the tool's concurrency limit")
	work := flag.Duration("work", 10*time.Millisecond, "goodput: how long one call works")
	duration := flag.Duration("duration", 5*time.Second, "goodput: length of each phase")
	load := flag.Float64("load", 2, "goodput: offered load as a multiple of measured capacity")
	flag.Parse()

	switch *mode {
	case "slow":
		for _, f := range strings.Split(*streams, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				fatal("bad -streams value %q", f)
			}
			slow(n, *reports, *interval, *capacity, *trickle)
		}
	case "goodput":
		goodput(*conc, *work, *duration, *load)
	default:
		fatal("unknown -mode %q", *mode)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "flowbench: "+format+"\n", args...)
	os.Exit(1)
}

// serve starts srv on a loopback port and returns its endpoint.
func serve(srv *server.Server, opts *streamhttp.HandlerOptions) (string, func()) {
	h, err := streamhttp.NewHandler(srv, opts)
	if err != nil {
		fatal("%v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal("%v", err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String() + "/mcp", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Shutdown(ctx)
		hs.Close()
	}
}

func newServer(opts server.Options) *server.Server {
	opts.Logger = slog.New(slog.DiscardHandler)
	srv, err := server.New(mcp.Implementation{Name: "flowbench", Version: "1"}, &opts)
	if err != nil {
		fatal("%v", err)
	}
	return srv
}

// post sends a modern tools/call.
func post(ctx context.Context, client *http.Client, url string, id int, tool string, args map[string]any, progress bool) (*http.Response, error) {
	meta := map[string]any{mcp.MetaProtocolVersion: mcp.Version20260728, mcp.MetaClientCapabilities: map[string]any{}}
	if progress {
		meta[mcp.MetaProgressToken] = id
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args, "_meta": meta}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version20260728)
	req.Header.Set(mcp.HeaderMethod, "tools/call")
	req.Header.Set(mcp.HeaderName, tool)
	return client.Do(req)
}

// memory samples the process's heap until stopped: the heap in use
// (which includes garbage not yet collected) and the live heap as of the
// last collection, which is what the process really holds.
type memory struct {
	peakHeap atomic.Uint64
	peakLive atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
}

func sampleMemory() *memory {
	m := &memory{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > m.peakHeap.Load() {
				m.peakHeap.Store(ms.HeapInuse)
			}
			metrics.Read(live)
			if v := live[0].Value.Uint64(); v > m.peakLive.Load() {
				m.peakLive.Store(v)
			}
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memory) end() uint64 { close(m.stop); <-m.done; return m.peakHeap.Load() }

// peakRSS reads the process's high-water resident set (VmHWM) in bytes.
func peakRSS() uint64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mb(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/(1<<20)) }

// slow runs n streams whose tool reports `reports` progress values as fast
// as it can while each client reads `trickle` bytes every 10 ms.
func slow(n, reports int, interval time.Duration, capacity, trickle int) {
	srv := newServer(server.Options{ProgressInterval: interval, MaxConcurrentCalls: max(n, 1)})
	err := srv.AddTool(server.Tool{Name: "flood", Policy: server.Policy{Timeout: server.TimeoutLong, MaxTimeout: time.Hour, IdleTimeout: time.Hour}},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			for v := 1; v <= reports; v++ {
				req.ReportProgress(float64(v), float64(reports), "")
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("flooded")}}, nil
		})
	if err != nil {
		fatal("%v", err)
	}
	url, stop := serve(srv, &streamhttp.HandlerOptions{StreamCapacity: capacity, KeepAlive: time.Hour})
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n,
		// Small client buffers, so that the reader, not a buffer, sets
		// the pace.
		ReadBufferSize: 4096, DisableCompression: true}}

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	mem := sampleMemory()
	start := time.Now()
	var wg sync.WaitGroup
	var delivered, flagged, finals atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := post(context.Background(), client, url, i+1, "flood", map[string]any{}, true)
			if err != nil {
				fatal("stream %d: %v", i, err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(&trickleReader{r: resp.Body, n: trickle})
			for {
				line, err := r.ReadString('\n')
				if strings.HasPrefix(line, "data: ") {
					if strings.Contains(line, `"result"`) {
						finals.Add(1)
						if strings.Contains(line, mcp.MetaRefetch) {
							flagged.Add(1)
						}
						return
					}
					delivered.Add(1)
				}
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	peak := mem.end()
	// What is left once everything is collected shows nothing leaked.
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fmt.Printf("slow: streams=%d reports/stream=%d interval=%v capacity=%d | results %d/%d (refetch flag on %d) | progress delivered %d of %d | peak live heap %s | heap in use: before %s, peak %s, after %s | peak RSS %s | %v\n",
		n, reports, interval, capacity, finals.Load(), n, flagged.Load(), delivered.Load(), int64(n)*int64(reports),
		mb(mem.peakLive.Load()), mb(before.HeapInuse), mb(peak), mb(after.HeapInuse), mb(peakRSS()), elapsed.Round(time.Millisecond))
}

// trickleReader reads at most n bytes every 10 ms: a slow consumer.
type trickleReader struct {
	r    io.Reader
	n    int
	last time.Time
}

func (t *trickleReader) Read(p []byte) (int, error) {
	if wait := 10*time.Millisecond - time.Since(t.last); wait > 0 {
		time.Sleep(wait)
	}
	t.last = time.Now()
	return t.r.Read(p[:min(len(p), t.n)])
}

// goodput measures capacity with exactly `conc` callers, then offers
// `load` times that rate open-loop and counts what completes.
func goodput(conc int, work, duration time.Duration, load float64) {
	srv := newServer(server.Options{MaxConcurrentCalls: 256, MaxQueuedCalls: 1024})
	err := srv.AddTool(server.Tool{Name: "work", Policy: server.Policy{MaxConcurrent: conc, MaxQueued: conc}},
		func(ctx context.Context, req *server.CallRequest) (*mcp.CallToolResult, error) {
			t := time.NewTimer(work)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.Text("done")}}, nil
		})
	if err != nil {
		fatal("%v", err)
	}
	url, stop := serve(srv, nil)
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}

	type outcome struct{ ok, overloaded, noRetryAfter, other atomic.Int64 }
	call := func(id int, o *outcome) {
		resp, err := post(context.Background(), client, url, id, "work", map[string]any{}, false)
		if err != nil {
			o.other.Add(1)
			return
		}
		var body struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code int64       `json:"code"`
				Data mcp.Failure `json:"data"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		switch {
		case body.Result != nil && !bytes.Contains(body.Result, []byte(`"isError":true`)):
			o.ok.Add(1)
		case body.Error != nil && body.Error.Code == mcp.CodeOverloaded:
			o.overloaded.Add(1)
			if body.Error.Data.RetryAfterMs <= 0 || resp.Header.Get("Retry-After") == "" {
				o.noRetryAfter.Add(1)
			}
		default:
			o.other.Add(1)
		}
	}

	// Capacity: exactly conc callers, back to back.
	var capOut outcome
	var id atomic.Int64
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				call(int(id.Add(1)), &capOut)
			}
		}()
	}
	wg.Wait()
	capacity := float64(capOut.ok.Load()) / duration.Seconds()

	// Overload: open loop at load × capacity.
	var over outcome
	rate := capacity * load
	gap := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	offered := 0
	for next := start; time.Since(start) < duration; next = next.Add(gap) {
		time.Sleep(time.Until(next))
		offered++
		wg.Add(1)
		go func() { defer wg.Done(); call(int(id.Add(1)), &over) }()
	}
	wg.Wait()
	good := float64(over.ok.Load()) / duration.Seconds()
	fmt.Printf("goodput: concurrency=%d work=%v | capacity %.0f calls/s (theory %.0f) | offered %.0f calls/s (%d calls) | goodput %.0f calls/s = %.1f%% of capacity | refused overloaded %d (without retryAfterMs or Retry-After: %d) | other errors %d\n",
		conc, work, capacity, float64(conc)/work.Seconds(), float64(offered)/duration.Seconds(), offered,
		good, 100*good/capacity, over.overloaded.Load(), over.noRetryAfter.Load(), over.other.Load()+capOut.other.Load())
}
