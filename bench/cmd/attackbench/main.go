// Command attackbench runs the hostile-client attacks of the hardening
// issue against `mcprel serve --http` builds in one run, and reports each
// server's peak resident memory (VmHWM) and whether a legitimate client
// was served during and after the attack.
//
//	attackbench -attack slowbody -server "before=/tmp/b/mcprel-before serve --http 127.0.0.1:0" \
//	    -server "after=/tmp/b/mcprel serve --http 127.0.0.1:0"
//
// Attacks:
//
//	slowbody   -conns clients each declare a 4 MB body, send one byte and
//	           stop, held for -hold
//	queued     64 long slow_count calls, then 200 echo calls of 4 MiB each
//	slowcalls  -calls concurrent long slow_count calls, held for -hold
//
// The attacker connects from 127.0.0.1, the legitimate client from
// 127.0.0.2: another address, as a real bystander would be.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

type serverSpec struct {
	name string
	argv []string
}

type serverList []serverSpec

func (l *serverList) String() string { return fmt.Sprint(*l) }
func (l *serverList) Set(v string) error {
	name, cmdline, ok := strings.Cut(v, "=")
	if !ok || name == "" || len(strings.Fields(cmdline)) == 0 {
		return fmt.Errorf("want name=command line, got %q", v)
	}
	*l = append(*l, serverSpec{name, strings.Fields(cmdline)})
	return nil
}

func main() {
	var servers serverList
	flag.Var(&servers, "server", "name=command line of an mcprel serve --http that prints its URL on stderr (repeatable)")
	attack := flag.String("attack", "slowbody", "slowbody, queued or slowcalls")
	conns := flag.Int("conns", 15000, "slowbody: attacking connections")
	calls := flag.Int("calls", 5000, "slowcalls: concurrent slow calls")
	hold := flag.Duration("hold", 15*time.Second, "how long the attack is held")
	flag.StringVar(&attackerToken, "attacker-token", "", "bearer token the attacker sends (a tenant of the server's --token)")
	flag.StringVar(&bystanderToken, "bystander-token", "", "bearer token the bystander sends")
	flag.Parse()
	if len(servers) == 0 {
		fmt.Fprintln(os.Stderr, "attackbench: give at least one -server")
		os.Exit(2)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "server\tattack\tpeak RSS\tbystander during\tbystander after\tattack outcome\n")
	for _, s := range servers {
		r, err := run(s, *attack, *conns, *calls, *hold)
		if err != nil {
			fmt.Fprintf(os.Stderr, "attackbench: %s: %v\n", s.name, err)
			os.Exit(1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f MiB\t%s\t%s\t%s\n", s.name, *attack, float64(r.peakRSS)/(1<<20), r.during, r.after, r.outcome)
	}
	tw.Flush()
}

// The bearer tokens of the two clients, when the servers have tenants.
var attackerToken, bystanderToken string

type result struct {
	peakRSS       int64
	during, after string
	outcome       string
}

func run(s serverSpec, attack string, conns, calls int, hold time.Duration) (result, error) {
	dir, err := os.MkdirTemp("", "attackbench")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	br := bufio.NewReader(stderr)
	url, err := br.ReadString('\n')
	if err != nil {
		return result{}, fmt.Errorf("no URL: %w", err)
	}
	url = strings.TrimSpace(url)
	go io.Copy(io.Discard, br)
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")

	var res result
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var outcome func() string
	switch attack {
	case "slowbody":
		outcome = slowBodies(ctx, addr, conns)
	case "queued":
		outcome = queuedLarge(ctx, url)
	case "slowcalls":
		outcome = slowCalls(ctx, url, calls)
	default:
		return res, fmt.Errorf("unknown attack %q", attack)
	}
	time.Sleep(hold / 2)
	res.during = bystander(url)
	time.Sleep(hold / 2)
	res.peakRSS = peakRSS(cmd.Process.Pid)
	res.outcome = outcome()
	stop()
	time.Sleep(time.Second) // the attack's connections close
	res.after = bystander(url)
	return res, nil
}

// bystander makes one echo call from another loopback address and says
// how it went.
func bystander(url string) string {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext},
	}
	start := time.Now()
	status, err := post(context.Background(), client, url, bystanderToken, "echo", `{"text":"bystander"}`)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		return fmt.Sprintf("failed after %v (%v)", took, shortErr(err))
	}
	return fmt.Sprintf("%d in %v", status, took)
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

func post(ctx context.Context, client *http.Client, url, token, tool, args string) (int, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", tool)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// slowBodies opens conns connections that declare a 4 MB body, send one
// byte and wait; it reports how many the server still held at the end.
func slowBodies(ctx context.Context, addr string, conns int) func() string {
	var opened, failed atomic.Int64
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		head := "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		if attackerToken != "" {
			head += "Authorization: Bearer " + attackerToken + "\r\n"
		}
		head += "Content-Length: 4000000\r\n\r\n{"
		for range conns {
			if ctx.Err() != nil {
				return
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				failed.Add(1)
				continue
			}
			opened.Add(1)
			c.Write([]byte(head))
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	go func() {
		<-ctx.Done()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		alive := 0
		buf := make([]byte, 64)
		for _, c := range held {
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			_, err := c.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				alive++ // nothing from the server: still held open
			}
		}
		return fmt.Sprintf("%d opened, %d failed to connect, %d still held by the server", opened.Load(), failed.Load(), alive)
	}
}

// queuedLarge starts 64 long calls, then 200 echo calls of 4 MiB.
func queuedLarge(ctx context.Context, url string) func() string {
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 300}}
	for range 64 {
		go post(ctx, client, url, attackerToken, "slow_count", `{"steps":100000,"intervalMs":1000}`)
	}
	time.Sleep(time.Second)
	big := `{"text":"` + strings.Repeat("x", 4<<20-1024) + `"}` // the whole message within the 4 MiB cap
	var t tally
	for range 200 {
		go func() { t.add(post(ctx, client, url, attackerToken, "echo", big)) }()
	}
	return func() string { return t.String(200) }
}

// tally counts the answers an attack's calls got, by status.
type tally struct {
	mu     sync.Mutex
	counts map[string]int
}

func (t *tally) add(status int, err error) {
	key := strconv.Itoa(status)
	if err != nil {
		key = "error"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]int{}
	}
	t.counts[key]++
}

// String says how many of calls were answered, and how.
func (t *tally) String(calls int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	answered := 0
	for _, k := range slices.Sorted(maps.Keys(t.counts)) {
		parts = append(parts, fmt.Sprintf("%d answered %s", t.counts[k], k))
		answered += t.counts[k]
	}
	return strings.Join(append(parts, fmt.Sprintf("%d still running or waiting", calls-answered)), ", ")
}

// slowCalls starts calls concurrent long calls.
func slowCalls(ctx context.Context, url string, calls int) func() string {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: calls}}
	var t tally
	for range calls {
		go func() {
			status, err := post(ctx, client, url, attackerToken, "slow_count", `{"steps":100000,"intervalMs":1000}`)
			if ctx.Err() == nil {
				t.add(status, err)
			}
		}()
	}
	return func() string { return t.String(calls) }
}

// peakRSS is the process's peak resident set size (VmHWM), in bytes.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
