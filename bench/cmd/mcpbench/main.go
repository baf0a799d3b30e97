// Command mcpbench measures tools/call round trips of an echo tool over stdio
// or Streamable HTTP against several MCP servers in one run, so that they
// share the machine's conditions.
//
//	mcpbench -server "mcprel=/tmp/b/mcprel serve --stdio" -server "mcp-go=/tmp/b/peer-mcpgo"
//	mcpbench -transport http -server "mcprel=/tmp/b/mcprel serve --http 127.0.0.1:0" …
//
// For each run and server it spawns the server, performs the initialize
// handshake (legacy era) or none (modern era), warms up, then makes n calls
// one at a time and n calls from -conc goroutines: over the same connection
// (stdio), or over one pooled HTTP client (http).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcprel/mcprel/bench/internal/machine"
)

type serverSpec struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
}

// serverList is the -server flag: repeatable, each value a comma-separated
// list of name=command line (split on spaces; no shell quoting).
type serverList []serverSpec

func (l *serverList) String() string { return fmt.Sprint(*l) }

func (l *serverList) Set(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		name, cmdline, _ := strings.Cut(item, "=")
		name, argv := strings.TrimSpace(name), strings.Fields(cmdline)
		if name == "" || len(argv) == 0 {
			return fmt.Errorf("want name=command line, got %q", item)
		}
		if slices.ContainsFunc(*l, func(s serverSpec) bool { return s.Name == name }) {
			return fmt.Errorf("server name %q given twice", name)
		}
		*l = append(*l, serverSpec{name, argv})
	}
	return nil
}

type config struct {
	N         int           `json:"n"`
	Warmup    int           `json:"warmup"`
	Conc      int           `json:"conc"`
	Runs      int           `json:"runs"`
	Era       string        `json:"era"`
	Transport string        `json:"transport"`
	Base      string        `json:"base"`
	Settle    time.Duration `json:"settleNs"`
	MaxOther  float64       `json:"maxOtherCpu"`
	Retries   int           `json:"retries"`
	IdleWait  time.Duration `json:"idleWaitNs"`
	Timeout   time.Duration `json:"timeoutNs"`
	StderrDir string        `json:"stderrDir,omitempty"`
}

// phaseResult is one measured phase. Latencies are in microseconds.
type phaseResult struct {
	CallsPerSec float64 `json:"callsPerSec"`
	P50us       float64 `json:"p50us"`
	P99us       float64 `json:"p99us"`
	// CPU per call within this phase alone (JSON only: the table shows
	// both phases together).
	ServerCPUus float64 `json:"serverCpuUsPerCall"`
	ClientCPUus float64 `json:"clientCpuUsPerCall"`
}

type runResult struct {
	Server string      `json:"server"`
	Run    int         `json:"run"`
	Seq    phaseResult `json:"seq"`
	Conc   phaseResult `json:"conc"`
	// CPU per call over both measured phases (2n calls).
	ServerCPUus float64 `json:"serverCpuUsPerCall"`
	ClientCPUus float64 `json:"clientCpuUsPerCall"`
	// OtherCPU is the CPUs' busy time during the phases that was neither
	// the server's nor ours, per second of wall time: other load on the box.
	OtherCPU float64 `json:"otherCpu"`
	// Dials is the TCP connections the HTTP client opened in the whole
	// run: about conc when connections are reused.
	Dials   int64  `json:"dials,omitempty"`
	Attempt int    `json:"attempt"` // 1 unless earlier attempts saw other load
	Errors  int    `json:"errors"`
	Err     string `json:"error,omitempty"`
}

// metric is one column of the summary.
type metric struct {
	Name string
	Fmt  string
	get  func(runResult) float64
}

var metrics = []metric{
	{"seq calls/s", "%.0f", func(r runResult) float64 { return r.Seq.CallsPerSec }},
	{"seq p50 µs", "%.0f", func(r runResult) float64 { return r.Seq.P50us }},
	{"seq p99 µs", "%.0f", func(r runResult) float64 { return r.Seq.P99us }},
	{"conc calls/s", "%.0f", func(r runResult) float64 { return r.Conc.CallsPerSec }},
	{"conc p50 µs", "%.0f", func(r runResult) float64 { return r.Conc.P50us }},
	{"conc p99 µs", "%.0f", func(r runResult) float64 { return r.Conc.P99us }},
	{"server CPU µs/call", "%.1f", func(r runResult) float64 { return r.ServerCPUus }},
	{"client CPU µs/call", "%.1f", func(r runResult) float64 { return r.ClientCPUus }},
}

// stat is a metric over the successful runs.
type stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

type summary struct {
	Server     string          `json:"server"`
	OKRuns     int             `json:"okRuns"`
	FailedRuns int             `json:"failedRuns"`
	Stats      map[string]stat `json:"stats"` // keyed by metric name
}

// ratio compares a server with the base, each ratio > 1 favouring the base.
type ratio struct {
	Server        string  `json:"server"`
	Base          string  `json:"base"`
	SeqCallsPerS  float64 `json:"seqCallsPerSec"`  // base / server
	ConcCallsPerS float64 `json:"concCallsPerSec"` // base / server
	ServerCPU     float64 `json:"serverCpu"`       // server / base
	ClientCPU     float64 `json:"clientCpu"`       // server / base
}

func main() {
	var servers serverList
	var cfg config
	flag.Var(&servers, "server", "`name=command line` of a server to measure; repeatable or comma-separated")
	flag.IntVar(&cfg.N, "n", 5000, "calls per measured phase")
	flag.IntVar(&cfg.Warmup, "warmup", 200, "unmeasured calls before the phases")
	flag.IntVar(&cfg.Conc, "conc", 16, "goroutines in the concurrent phase")
	flag.IntVar(&cfg.Runs, "runs", 3, "runs per server; servers take turns within each run")
	flag.StringVar(&cfg.Era, "era", "legacy", "legacy (initialize handshake, 2025-11-25) or modern (2026-07-28 _meta on every request)")
	flag.StringVar(&cfg.Transport, "transport", "stdio", "stdio, or http: each command serves Streamable HTTP and prints its endpoint URL on a line of its own (stdout or stderr)")
	flag.StringVar(&cfg.Base, "base", "mcprel", "server the others are compared with (the first if absent)")
	flag.DurationVar(&cfg.Settle, "settle", time.Second, "before each server run, wait until the machine was idle for this long")
	flag.Float64Var(&cfg.MaxOther, "max-other", 0.1, "CPUs of other load tolerated while idle or measuring")
	flag.IntVar(&cfg.Retries, "retries", 3, "times a run is repeated because other load exceeded -max-other")
	flag.DurationVar(&cfg.IdleWait, "idle-wait", 10*time.Minute, "longest wait for the machine to become idle")
	flag.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "kill a server whose run takes longer")
	flag.StringVar(&cfg.StderrDir, "stderr-dir", "", "write each server's stderr to a file here (default: discard)")
	asJSON := flag.Bool("json", false, "print results as JSON")
	flag.Parse()
	if len(servers) == 0 || cfg.N <= 0 || cfg.Warmup < 0 || cfg.Conc <= 0 || cfg.Runs <= 0 ||
		(cfg.Era != "legacy" && cfg.Era != "modern") || (cfg.Transport != "stdio" && cfg.Transport != "http") || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if !slices.ContainsFunc(servers, func(s serverSpec) bool { return s.Name == cfg.Base }) {
		cfg.Base = servers[0].Name
	}

	load, _ := os.ReadFile("/proc/loadavg")
	host := map[string]any{"cpus": runtime.NumCPU(), "go": runtime.Version(), "loadavgBefore": strings.TrimSpace(string(load)), "clockTicks": machine.ClockTicks}
	fmt.Fprintf(os.Stderr, "mcpbench: %s, era %s, n %d, warmup %d, conc %d, runs %d, %d CPUs, load %s\n",
		cfg.Transport, cfg.Era, cfg.N, cfg.Warmup, cfg.Conc, cfg.Runs, runtime.NumCPU(), host["loadavgBefore"])

	// Servers take turns within each run so slow drift in the machine's
	// state affects them alike.
	var results []runResult
	for run := 1; run <= cfg.Runs; run++ {
		for _, s := range servers {
			var r runResult
			for attempt := 1; ; attempt++ {
				if waited, idle := machine.WaitIdle(cfg.Settle, cfg.MaxOther, cfg.IdleWait); !idle {
					fmt.Fprintf(os.Stderr, "  machine still busy after %v; measuring anyway\n", waited.Round(time.Second))
				}
				r = measure(s, run, cfg)
				r.Attempt = attempt
				if r.Err != "" {
					fmt.Fprintf(os.Stderr, "  run %d %-12s FAILED: %s\n", run, s.Name, r.Err)
				} else {
					fmt.Fprintf(os.Stderr, "  run %d %-12s seq %6.0f/s  conc %6.0f/s  srv %5.1f µs/call  cli %5.1f µs/call  other %.2f CPUs",
						run, s.Name, r.Seq.CallsPerSec, r.Conc.CallsPerSec, r.ServerCPUus, r.ClientCPUus, r.OtherCPU)
					if r.Dials > 0 {
						fmt.Fprintf(os.Stderr, "  dials %d", r.Dials)
					}
					fmt.Fprintln(os.Stderr)
				}
				if r.OtherCPU <= cfg.MaxOther || attempt > cfg.Retries {
					break
				}
			}
			results = append(results, r)
		}
	}

	sums := summarize(servers, results)
	ratios := compare(sums, cfg.Base)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(map[string]any{"config": cfg, "servers": servers, "host": host, "runs": results, "summary": sums, "ratios": ratios})
	} else {
		printTable(cfg, results, sums, ratios)
	}
	for _, s := range sums {
		if s.FailedRuns > 0 {
			os.Exit(1)
		}
	}
}

// measure spawns one server and runs the phases against it.
func measure(s serverSpec, run int, cfg config) runResult {
	r := runResult{Server: s.Name, Run: run}
	fail := func(err error) runResult { r.Err = err.Error(); return r }
	var stderrPath string
	if cfg.StderrDir != "" {
		stderrPath = filepath.Join(cfg.StderrDir, fmt.Sprintf("%s-%s-%s-run%d.stderr", s.Name, cfg.Transport, cfg.Era, run))
	}
	var c client
	var err error
	if cfg.Transport == "http" {
		c, err = startHTTP(s, cfg.Era, stderrPath, cfg.Timeout)
	} else {
		c, err = start(s, cfg.Era, stderrPath, cfg.Timeout)
	}
	if err != nil {
		return fail(err)
	}
	defer c.stop()
	if cfg.Era == "legacy" {
		if err := c.initialize(); err != nil {
			return fail(err)
		}
	}
	if _, _, n, err := phase(c, cfg.Warmup, cfg.Conc); n > 0 {
		r.Errors = n
		return fail(fmt.Errorf("warmup: %d errors, first: %w", n, err))
	}

	pid := c.pid()
	srv0, err := machine.ProcCPU(pid)
	if err != nil {
		return fail(err)
	}
	cli0 := machine.SelfCPU()
	sys0, _ := machine.SysBusy()
	seqLat, seqWall, seqErrs, seqErr := phase(c, cfg.N, 1)
	cliMid := machine.SelfCPU()
	srvMid, err := machine.ProcCPU(pid)
	if err != nil {
		return fail(err)
	}
	concLat, concWall, concErrs, concErr := phase(c, cfg.N, cfg.Conc)
	sys1, _ := machine.SysBusy()
	cli1 := machine.SelfCPU()
	srv1, err := machine.ProcCPU(pid)
	if err != nil {
		return fail(err)
	}

	perCall := func(d time.Duration, calls int) float64 {
		return float64(d) / float64(time.Microsecond) / float64(calls)
	}
	r.Seq = phaseStats(seqLat, seqWall)
	r.Seq.ServerCPUus, r.Seq.ClientCPUus = perCall(srvMid-srv0, cfg.N), perCall(cliMid-cli0, cfg.N)
	r.Conc = phaseStats(concLat, concWall)
	r.Conc.ServerCPUus, r.Conc.ClientCPUus = perCall(srv1-srvMid, cfg.N), perCall(cli1-cliMid, cfg.N)
	r.ServerCPUus, r.ClientCPUus = perCall(srv1-srv0, 2*cfg.N), perCall(cli1-cli0, 2*cfg.N)
	r.OtherCPU = max(0, (sys1-sys0-(srv1-srv0)-(cli1-cli0)).Seconds()/(seqWall+concWall).Seconds())
	r.Errors = seqErrs + concErrs
	if hc, ok := c.(*httpConn); ok {
		r.Dials = hc.dials.Load()
	}
	if r.Errors > 0 {
		return fail(fmt.Errorf("%d errors, first: %w", r.Errors, errors.Join(seqErr, concErr)))
	}
	return r
}

func phaseStats(lat []time.Duration, wall time.Duration) phaseResult {
	slices.Sort(lat)
	us := func(q float64) float64 { // nearest-rank percentile
		i := int(q*float64(len(lat))+0.999999) - 1
		return float64(lat[max(i, 0)]) / float64(time.Microsecond)
	}
	return phaseResult{CallsPerSec: float64(len(lat)) / wall.Seconds(), P50us: us(0.50), P99us: us(0.99)}
}

func summarize(servers []serverSpec, results []runResult) []summary {
	var sums []summary
	for _, s := range servers {
		sum := summary{Server: s.Name, Stats: map[string]stat{}}
		var ok []runResult
		for _, r := range results {
			switch {
			case r.Server != s.Name:
			case r.Err != "":
				sum.FailedRuns++
			default:
				ok = append(ok, r)
			}
		}
		sum.OKRuns = len(ok)
		for _, m := range metrics {
			if len(ok) == 0 {
				break
			}
			v := make([]float64, len(ok))
			for i, r := range ok {
				v[i] = m.get(r)
			}
			slices.Sort(v)
			med := v[len(v)/2]
			if len(v)%2 == 0 {
				med = (v[len(v)/2-1] + med) / 2
			}
			sum.Stats[m.Name] = stat{med, v[0], v[len(v)-1]}
		}
		sums = append(sums, sum)
	}
	return sums
}

func compare(sums []summary, base string) []ratio {
	i := slices.IndexFunc(sums, func(s summary) bool { return s.Server == base })
	b := sums[i].Stats
	var out []ratio
	for _, s := range sums {
		if s.Server == base || s.OKRuns == 0 || sums[i].OKRuns == 0 {
			continue
		}
		p := s.Stats
		out = append(out, ratio{
			Server: s.Server, Base: base,
			SeqCallsPerS:  b["seq calls/s"].Median / p["seq calls/s"].Median,
			ConcCallsPerS: b["conc calls/s"].Median / p["conc calls/s"].Median,
			ServerCPU:     p["server CPU µs/call"].Median / b["server CPU µs/call"].Median,
			ClientCPU:     p["client CPU µs/call"].Median / b["client CPU µs/call"].Median,
		})
	}
	return out
}

func printTable(cfg config, results []runResult, sums []summary, ratios []ratio) {
	var other float64
	for _, r := range results {
		other = max(other, r.OtherCPU)
	}
	fmt.Printf("%s, era %s: n=%d per phase, conc=%d, warmup=%d; median over %d runs [min–max]; other load at most %.2f CPUs\n\n",
		cfg.Transport, cfg.Era, cfg.N, cfg.Conc, cfg.Warmup, cfg.Runs, other)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "server\t")
	for _, m := range metrics {
		fmt.Fprintf(tw, "%s\t", m.Name)
	}
	fmt.Fprintln(tw)
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t", s.Server)
		for _, m := range metrics {
			if st, ok := s.Stats[m.Name]; ok {
				fmt.Fprintf(tw, m.Fmt+" ["+m.Fmt+"–"+m.Fmt+"]\t", st.Median, st.Min, st.Max)
			} else {
				fmt.Fprint(tw, "-\t")
			}
		}
		if s.FailedRuns > 0 {
			fmt.Fprintf(tw, "FAILED %d/%d runs\t", s.FailedRuns, s.FailedRuns+s.OKRuns)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if len(ratios) == 0 {
		return
	}
	fmt.Printf("\nratios against %s (> 1 favours %s): calls/s as %s / server, CPU as server / %s\n\n",
		ratios[0].Base, ratios[0].Base, ratios[0].Base, ratios[0].Base)
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tseq calls/s\tconc calls/s\tserver CPU\tclient CPU\t")
	for _, r := range ratios {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Server, r.SeqCallsPerS, r.ConcCallsPerS, r.ServerCPU, r.ClientCPU)
	}
	tw.Flush()
}
