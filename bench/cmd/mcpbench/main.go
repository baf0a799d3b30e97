// Command mcpbench measures tools/call round trips of an echo tool over stdio
// or Streamable HTTP against several MCP servers in one run, so that they
// share the machine's conditions.
//
//	mcpbench -server "mcprel=/tmp/b/mcprel serve --stdio" -server "mcp-go=/tmp/b/peer-mcpgo"
//	mcpbench -transport http -server "mcprel=/tmp/b/mcprel serve --http 127.0.0.1:0" …
//
// For each run and server it spawns the server (after its -sidecar
// processes, if any), performs the initialize handshake (legacy era) or
// none (modern era), warms up, then makes n calls one at a time and n
// calls from -conc goroutines: over the same connection (stdio), or over
// one pooled HTTP client (http). Server CPU and RSS are those of the
// server's whole process tree, and of its sidecars' trees.
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
	// CPU per call over both measured phases (2n calls). ServerCPUus is
	// the server's process tree and its sidecars' (SidecarCPUus of it);
	// ServerPidCPUus the spawned process alone, its threads but none of
	// its children.
	ServerCPUus    float64 `json:"serverCpuUsPerCall"`
	ServerPidCPUus float64 `json:"serverPidCpuUsPerCall"`
	SidecarCPUus   float64 `json:"sidecarCpuUsPerCall,omitempty"`
	OrphanCPUus    float64 `json:"orphanCpuUsPerCall,omitempty"` // of processes that lost their parent in the tree
	ClientCPUus    float64 `json:"clientCpuUsPerCall"`
	// ReaperCPUus is ours, spent reaping orphans; not in ClientCPUus.
	ReaperCPUus float64 `json:"reaperCpuUsPerCall,omitempty"`
	// Resident memory of the server's process tree and its sidecars', in
	// MiB (2^20 bytes), after warmup, after the sequential phase and after
	// the concurrent one; growth is the last less the first.
	RSSWarmMiB    float64 `json:"rssAfterWarmupMiB"`
	RSSSeqMiB     float64 `json:"rssAfterSeqMiB"`
	RSSMiB        float64 `json:"rssAfterConcMiB"`
	RSSGrowthMiB  float64 `json:"rssGrowthMiB"`
	SidecarRSSMiB float64 `json:"sidecarRssAfterConcMiB,omitempty"`
	// Procs is the processes in the server's tree after the concurrent
	// phase, the server and live adopted orphans included (sidecars' not).
	Procs        int `json:"procs"`
	SidecarProcs int `json:"sidecarProcs,omitempty"`
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
	{"RSS MiB after", "%.1f", func(r runResult) float64 { return r.RSSMiB }},
	{"RSS growth MiB", "%.1f", func(r runResult) float64 { return r.RSSGrowthMiB }},
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
	RSS           float64 `json:"rssAfterConc"`    // server / base
}

func main() {
	var servers serverList
	var sidecars sidecarList
	bearers := bearerList{}
	var cfg config
	flag.Var(&servers, "server", "`name=[URL@]command line` of a server to measure, its words quoted as in a shell; repeatable. "+
		"With URL (http://HOST:PORT/PATH) the server serves there and mcpbench waits for the port to accept connections; "+
		"without, an HTTP server prints its URL. {tmp} in a word becomes a directory made for the run")
	flag.Var(&sidecars, "sidecar", "`name=URL@command line` started before server name in each of its runs, once its URL's port accepts connections, "+
		"and stopped after it; its CPU and RSS are charged to the server (repeatable)")
	flag.Var(bearers, "bearer", "`name=token`: send \"Authorization: Bearer token\" on every HTTP request to server name (repeatable). "+
		"No output shows the token, nor any word of a command line holding it")
	flag.IntVar(&cfg.N, "n", 5000, "calls per measured phase")
	flag.IntVar(&cfg.Warmup, "warmup", 200, "unmeasured calls before the phases")
	flag.IntVar(&cfg.Conc, "conc", 16, "goroutines in the concurrent phase")
	flag.IntVar(&cfg.Runs, "runs", 3, "runs per server; servers take turns within each run")
	flag.StringVar(&cfg.Era, "era", "legacy", "legacy (initialize handshake, 2025-11-25) or modern (2026-07-28 _meta on every request)")
	flag.StringVar(&cfg.Transport, "transport", "stdio", "stdio, or http: each command serves Streamable HTTP and prints its endpoint URL on a line of its own (stdout or stderr), or its spec names the URL")
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
	for _, sc := range sidecars {
		if !slices.ContainsFunc(servers, func(s serverSpec) bool { return s.Name == sc.Name }) {
			fmt.Fprintf(os.Stderr, "mcpbench: -sidecar %q: no -server of that name\n", sc.Name)
			os.Exit(2)
		}
	}
	if err := withBearers(servers, bearers); err != nil {
		fmt.Fprintf(os.Stderr, "mcpbench: %v\n", err)
		os.Exit(2)
	}
	for _, s := range servers {
		if (s.URL != "" || s.Bearer) && cfg.Transport != "http" {
			fmt.Fprintf(os.Stderr, "mcpbench: -server %q: a URL or -bearer is for -transport http\n", s.Name)
			os.Exit(2)
		}
	}
	if !slices.ContainsFunc(servers, func(s serverSpec) bool { return s.Name == cfg.Base }) {
		cfg.Base = servers[0].Name
	}

	var err error
	if orphans, err = machine.AdoptOrphans(); err != nil {
		fmt.Fprintf(os.Stderr, "mcpbench: cannot adopt orphaned processes (%v): the CPU of a server's descendants whose parent exits first is not counted\n", err)
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
				r = measure(s, sidecarsOf(sidecars, s.Name), run, cfg)
				r.Attempt = attempt
				if r.Err != "" {
					fmt.Fprintf(os.Stderr, "  run %d %-12s FAILED: %s\n", run, s.Name, r.Err)
				} else {
					fmt.Fprintf(os.Stderr, "  run %d %-12s seq %6.0f/s  conc %6.0f/s  srv %5.1f µs/call  cli %5.1f µs/call  rss %.1f MiB (%+.1f)  procs %d  other %.2f CPUs",
						run, s.Name, r.Seq.CallsPerSec, r.Conc.CallsPerSec, r.ServerCPUus, r.ClientCPUus, r.RSSMiB, r.RSSGrowthMiB, r.Procs+r.SidecarProcs, r.OtherCPU)
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
		enc.Encode(map[string]any{"config": cfg, "servers": redacted(servers, bearers), "sidecars": redacted(sidecars, bearers), "host": host, "runs": results, "summary": sums, "ratios": ratios})
	} else {
		printTable(cfg, results, sums, ratios)
	}
	for _, s := range sums {
		if s.FailedRuns > 0 {
			os.Exit(1)
		}
	}
}

func sidecarsOf(all []serverSpec, name string) []serverSpec {
	var out []serverSpec
	for _, s := range all {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// clientCPU is the CPU time of this process, less that of reaping orphans.
func clientCPU() time.Duration { return machine.SelfCPU() - orphans.ReaperCPU() }

// orphans collects the processes that leave a server's tree by losing
// their parent, so that their CPU time is still the server's.
var orphans *machine.Orphans

// usage is one reading of the CPU and memory of a server and its sidecars.
type usage struct {
	cpu, pidCPU, sideCPU, orphanCPU time.Duration
	rss, sideRSS                    int64
	procs, sideProcs                int
}

// sample reads the process trees of the server (pid) and the sidecars, and
// the orphans adopted from them: the server's figures include all three.
func sample(pid int, sidecars []*proc) (usage, error) {
	var u usage
	t, err := machine.Tree(pid)
	if err != nil {
		return u, fmt.Errorf("server: %w", err)
	}
	if u.pidCPU, err = machine.ProcCPU(pid); err != nil {
		return u, fmt.Errorf("server: %w", err)
	}
	u.cpu, u.rss, u.procs = t.CPU, machine.RSS(t.Pids), len(t.Pids)
	for _, p := range sidecars {
		t, err := machine.Tree(p.pid())
		if err != nil {
			return u, fmt.Errorf("sidecar %v: %w", p.cmd.Args, err)
		}
		rss := machine.RSS(t.Pids)
		u.sideCPU += t.CPU
		u.sideRSS += rss
		u.sideProcs += len(t.Pids)
		u.cpu += t.CPU
		u.rss += rss
	}
	cpu, pids := orphans.Sample()
	u.orphanCPU = cpu
	u.cpu += cpu
	u.rss += machine.RSS(pids)
	u.procs += len(pids)
	return u, nil
}

// measure spawns one server (after its sidecars) and runs the phases
// against it.
func measure(s serverSpec, sidecarSpecs []serverSpec, run int, cfg config) runResult {
	r := runResult{Server: s.Name, Run: run}
	fail := func(err error) runResult { r.Err = err.Error(); return r }
	outPath := func(what string) string {
		if cfg.StderrDir == "" {
			return ""
		}
		return filepath.Join(cfg.StderrDir, fmt.Sprintf("%s-%s-%s-run%d%s", s.Name, cfg.Transport, cfg.Era, run, what))
	}
	dir, err := os.MkdirTemp("", "mcpbench-"+filepath.Base(s.Name)+"-*")
	if err != nil {
		return fail(err)
	}
	defer removeAll(dir) // deferred first, so it runs after every stop
	defer func() {
		if n := orphans.Drain(2 * time.Second); n > 0 {
			fmt.Fprintf(os.Stderr, "  %s: killed %d orphaned processes still running 2 s after the server stopped\n", s.Name, n)
		}
	}()
	s.Argv = withTmp(s.Argv, dir)

	var sidecars []*proc
	for i, sc := range sidecarSpecs {
		if err := checkPortFree(sc); err != nil {
			return fail(fmt.Errorf("sidecar: %w", err))
		}
		p, err := startProc(withTmp(sc.Argv, dir), outPath(fmt.Sprintf(".sidecar%d.log", i+1)), cfg.Timeout)
		if err != nil {
			return fail(fmt.Errorf("sidecar %d: %w", i+1, err))
		}
		defer p.stop() // after the server's stop, deferred later
		if _, err := p.waitURL(sc); err != nil {
			return fail(fmt.Errorf("sidecar %d: %w", i+1, err))
		}
		sidecars = append(sidecars, p)
	}

	if err := checkPortFree(s); err != nil {
		return fail(err)
	}
	var c client
	if cfg.Transport == "http" {
		c, err = startHTTP(s, cfg.Era, outPath(".stderr"), cfg.Timeout)
	} else {
		c, err = start(s, cfg.Era, outPath(".stderr"), cfg.Timeout)
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

	// The process trees are read outside the client's CPU windows, so
	// that walking /proc is charged to neither side.
	pid := c.pid()
	u0, err := sample(pid, sidecars)
	if err != nil {
		return fail(err)
	}
	sys0, _ := machine.SysBusy()
	reap0 := orphans.ReaperCPU()
	cli0 := clientCPU()
	seqLat, seqWall, seqErrs, seqErr := phase(c, cfg.N, 1)
	cliSeq := clientCPU()
	uMid, err := sample(pid, sidecars)
	if err != nil {
		return fail(err)
	}
	cliMid := clientCPU()
	concLat, concWall, concErrs, concErr := phase(c, cfg.N, cfg.Conc)
	cli1 := clientCPU()
	reap1 := orphans.ReaperCPU()
	sys1, _ := machine.SysBusy()
	u1, err := sample(pid, sidecars)
	if err != nil {
		return fail(err)
	}

	perCall := func(d time.Duration, calls int) float64 {
		return float64(d) / float64(time.Microsecond) / float64(calls)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	cliCPU := (cliSeq - cli0) + (cli1 - cliMid)
	r.Seq = phaseStats(seqLat, seqWall)
	r.Seq.ServerCPUus, r.Seq.ClientCPUus = perCall(uMid.cpu-u0.cpu, cfg.N), perCall(cliSeq-cli0, cfg.N)
	r.Conc = phaseStats(concLat, concWall)
	r.Conc.ServerCPUus, r.Conc.ClientCPUus = perCall(u1.cpu-uMid.cpu, cfg.N), perCall(cli1-cliMid, cfg.N)
	r.ServerCPUus, r.ClientCPUus = perCall(u1.cpu-u0.cpu, 2*cfg.N), perCall(cliCPU, 2*cfg.N)
	r.ServerPidCPUus = perCall(u1.pidCPU-u0.pidCPU, 2*cfg.N)
	r.SidecarCPUus = perCall(u1.sideCPU-u0.sideCPU, 2*cfg.N)
	r.OrphanCPUus = perCall(u1.orphanCPU-u0.orphanCPU, 2*cfg.N)
	r.ReaperCPUus = perCall(reap1-reap0, 2*cfg.N)
	r.RSSWarmMiB, r.RSSSeqMiB, r.RSSMiB = mib(u0.rss), mib(uMid.rss), mib(u1.rss)
	r.RSSGrowthMiB = mib(u1.rss - u0.rss)
	r.SidecarRSSMiB = mib(u1.sideRSS)
	r.Procs, r.SidecarProcs = u1.procs, u1.sideProcs
	// Other load: the machine's busy time over the phases (and the short
	// sampling between them) that was neither the servers' nor ours.
	r.OtherCPU = max(0, (sys1-sys0-(u1.cpu-u0.cpu)-(cli1-cli0)-(reap1-reap0)).Seconds()/(seqWall+concWall).Seconds())
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
			RSS:           p["RSS MiB after"].Median / b["RSS MiB after"].Median,
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
	fmt.Printf("\nratios against %s (> 1 favours %s): calls/s as %s / server, CPU and RSS as server / %s\n\n",
		ratios[0].Base, ratios[0].Base, ratios[0].Base, ratios[0].Base)
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\tseq calls/s\tconc calls/s\tserver CPU\tclient CPU\tRSS\t")
	for _, r := range ratios {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Server, r.SeqCallsPerS, r.ConcCallsPerS, r.ServerCPU, r.ClientCPU, r.RSS)
	}
	tw.Flush()
}
