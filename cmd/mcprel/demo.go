package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mcprel/mcprel/mcp"
)

// demoCmd runs the lab: real servers ("mcprel serve --lab", over stdio
// and over HTTP on loopback, on a SQLite file in a temporary directory)
// driven through every race and failure the runtime promises an outcome
// for, with the order of events forced by gates. It prints a record per
// scenario, or with --json the same records as evidence a program reads.
// With --wire it instead prints every frame of a scripted exchange.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stdout)
	setUsage(fs, "usage: mcprel demo [--json | --wire] [--db PATH]",
		`Runs every race and failure the runtime promises one outcome for against
real servers (mcprel serve --lab, over stdio and Streamable HTTP), the
order of events forced by gates, and prints a record per scenario.`)
	asJSON := fs.Bool("json", false, "write the records as JSON")
	wire := fs.Bool("wire", false, "print the frames of a scripted exchange instead of the records")
	width := fs.Int("width", 160, "with --wire: truncate printed frames to this many characters (0: never)")
	dbPath := fs.String("db", "", "the SQLite file the demo's servers keep their ledger in (default: a fresh temporary file)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *width < 0 {
		return usagef("demo: --width must not be negative, not %d", *width)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: locating this binary: %w", err)
	}
	if *dbPath == "" {
		dir, err := os.MkdirTemp("", "mcprel-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*dbPath = filepath.Join(dir, "demo.db")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if *wire {
		return wireDemo(ctx, self, *dbPath, stdout, *width)
	}
	records, err := runLab(ctx, self, *dbPath)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(records); err == nil {
			err = jerr
		}
	} else {
		for _, r := range records {
			r.print(stdout)
		}
	}
	return err
}

// runLab runs every scenario of the lab and returns their records; on an
// error, the records made so far.
func runLab(ctx context.Context, self, db string) ([]Record, error) {
	var records []Record
	keep := func(r Record, err error) error {
		if err == nil {
			records = append(records, r)
		}
		return err
	}
	p, err := startLab(ctx, self, db)
	if err != nil {
		return nil, err
	}
	p.read()
	for _, scenario := range []func(*labProcess) (Record, error){raceCancelFirst, raceCompleteFirst, raceDeadlines, raceStdioDisconnect} {
		if err := keep(scenario(p)); err != nil {
			p.stop()
			return records, err
		}
	}
	h, err := startHTTPLab(ctx, self, db, nil)
	if err != nil {
		p.stop()
		return records, err
	}
	d, headers, err := raceHTTPDisconnect(ctx, h)
	h.stop()
	if err := keep(d, err); err != nil {
		p.stop()
		return records, err
	}
	ledger, err := ledgerRecords(ctx, self, db)
	records = append(records, ledger...)
	if err != nil {
		p.stop()
		return records, err
	}
	err = keep(taskRecord(p))
	if serr := p.stop(); err == nil && serr != nil {
		err = fmt.Errorf("demo: the lab server exited: %w", serr)
	}
	if err != nil {
		return records, err
	}
	flood, err := startLab(ctx, self, db)
	if err != nil {
		return records, err
	}
	err = keep(overloadRecord(flood, 500))
	flood.stop()
	if err != nil {
		return records, err
	}
	records = append(records, sseRecord(headers))
	if err = keep(reconnectRecord(ctx, self, db)); err != nil {
		return records, err
	}
	err = keep(outboxRecord(ctx, self, db))
	return records, err
}

// wireDemo is "mcprel demo --wire": "mcprel serve --stdio" driven through
// a scripted exchange in both eras, every frame printed, then the
// server's own log of what happened to each request.
func wireDemo(ctx context.Context, self, dbPath string, stdout io.Writer, width int) error {
	var report string // left running by the first process, resumed by the second
	err := runDemoServer(ctx, self, dbPath, stdout, width, "", func(d *demo) error {
		if err := d.script(); err != nil {
			return err
		}
		if err := d.ledgerScript(); err != nil {
			return err
		}
		var err error
		report, err = d.tasksScript()
		return err
	})
	if err != nil {
		return err
	}
	return runDemoServer(ctx, self, dbPath, stdout, width, "A new server process on the same database file", func(d *demo) error {
		if err := d.restartScript(); err != nil {
			return err
		}
		return d.restartTasks(report)
	})
}

// runDemoServer starts "mcprel serve --stdio" on dbPath, runs script
// against it, closes its input and prints its log.
func runDemoServer(ctx context.Context, self, dbPath string, stdout io.Writer, width int, title string, script func(*demo) error) error {
	var serverLog bytes.Buffer
	p, err := startStdio(ctx, self, []string{"serve", "--stdio", "--db", dbPath}, &serverLog)
	if err != nil {
		return err
	}
	p.read()
	d := &demo{w: stdout, p: p, width: width}
	if title != "" {
		d.say("%s", title)
	}
	err = script(d)
	d.say("Closing stdin: the server cancels calls in flight, stops running tasks at their next checkpoint (left for the next process) and exits")
	if werr := p.stop(); err == nil && werr != nil {
		err = fmt.Errorf("demo: server exited: %w", werr)
	}
	fmt.Fprintf(stdout, "\n== The server's log (stderr): one line per request, with its single outcome\n%s", serverLog.String())
	return err
}

// demo prints every frame that crosses the pipe to a labProcess.
type demo struct {
	w     io.Writer
	p     *labProcess
	width int
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.w, "\n== "+format+"\n", args...) }

func (d *demo) show(prefix, s string) {
	if d.width > 0 && len(s) > d.width {
		s = s[:d.width-1] + "…"
	}
	fmt.Fprintf(d.w, "%s %s\n", prefix, s)
}

func (d *demo) send(frame string) {
	d.show("→", frame)
	d.p.send(frame)
}

// next waits for the next frame from the server, and prints it.
func (d *demo) next() (labFrame, error) {
	f, err := d.p.next()
	if err == nil {
		d.show("←", string(f.raw))
	}
	return f, err
}

// until prints frames until the response with the given id (JSON text),
// and returns that response.
func (d *demo) until(id string) (labFrame, error) {
	for {
		f, err := d.next()
		if err != nil || string(f.ID) == id && f.Method == "" {
			return f, err
		}
	}
}

func (d *demo) call(id, method, params string) error {
	d.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, params))
	_, err := d.until(id)
	return err
}

func modernMeta(extra string) string {
	m := fmt.Sprintf(`"_meta":{%q:%q,%q:{},%q:{"name":"mcprel-demo","version":%q}%s}`,
		mcp.MetaProtocolVersion, mcp.Version20260728, mcp.MetaClientCapabilities, mcp.MetaClientInfo, version, extra)
	return m
}

func (d *demo) script() error {
	steps := []func() error{
		func() error {
			d.say("Legacy era (2025-11-25): the initialize handshake, then tools")
			if err := d.call("1", "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcprel-demo","version":"`+version+`"}}`); err != nil {
				return err
			}
			d.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			if err := d.call("2", "tools/list", `{}`); err != nil {
				return err
			}
			return d.call("3", "tools/call", `{"name":"echo","arguments":{"text":"hello, reliable world"}}`)
		},
		func() error {
			d.say("Progress: strictly increasing notifications, then the result")
			return d.call("4", "tools/call", `{"name":"slow_count","arguments":{"steps":3,"intervalMs":50},"_meta":{"progressToken":"count-4"}}`)
		},
		func() error {
			d.say("Race, cancellation first: after a cancellation wins, nothing more is written for request 5")
			d.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow_count","arguments":{"steps":100,"intervalMs":50},"_meta":{"progressToken":"count-5"}}}`)
			if _, err := d.next(); err != nil { // its first progress notification
				return err
			}
			d.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"the user closed the dialog"}}`)
			d.say("…a ping proves the connection is alive; no response to 5 ever arrives")
			return d.call("6", "ping", `{}`)
		},
		func() error {
			d.say("Race, completion first: the response is sent once and the late cancellation is ignored")
			if err := d.call("7", "tools/call", `{"name":"echo","arguments":{"text":"done before the cancel"}}`); err != nil {
				return err
			}
			d.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"too late"}}`)
			return d.call("8", "ping", `{}`)
		},
		func() error {
			d.say("Modern era (2026-07-28) on the same connection: no handshake, _meta on every request")
			if err := d.call("9", "server/discover", `{`+modernMeta("")+`}`); err != nil {
				return err
			}
			return d.call("10", "tools/call", `{"name":"echo","arguments":{"text":"stateless"},`+modernMeta("")+`}`)
		},
		func() error {
			d.say("Bad input gets a clear error, and the server keeps serving")
			d.send(`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":`)
			if _, err := d.next(); err != nil {
				return err
			}
			if err := d.call("12", "tools/call", `{"name":"slow_count","arguments":{"steps":"three"},`+modernMeta("")+`}`); err != nil {
				return err
			}
			return d.call("13", "tools/call", `{"name":"echo","arguments":{"text":"still serving"},`+modernMeta("")+`}`)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// tool calls a tool in the modern era and prints a one-line digest of the
// outcome under the frames: what a reader should notice.
func (d *demo) tool(id, name, args string) error {
	d.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":%s,%s}}`, id, name, args, modernMeta("")))
	f, err := d.until(id)
	if err != nil {
		return err
	}
	var resp struct {
		Result struct {
			IsError           bool           `json:"isError"`
			StructuredContent map[string]any `json:"structuredContent"`
			Meta              map[string]any `json:"_meta"`
		} `json:"result"`
	}
	json.Unmarshal(f.raw, &resp)
	r := resp.Result
	digest := ""
	if r.IsError {
		failure, _ := r.Meta[mcp.MetaFailure].(map[string]any)
		digest = fmt.Sprintf("isError, code %v", failure["code"])
	} else {
		b, _ := json.Marshal(r.StructuredContent)
		digest = string(b)
	}
	for _, k := range []string{mcp.MetaReplayed, mcp.MetaRetrySafe} {
		if v, ok := r.Meta[k]; ok {
			digest += fmt.Sprintf("; %s=%v", k, v)
		}
	}
	if d.width > 0 && len(digest) > d.width {
		digest = digest[:d.width-1] + "…"
	}
	fmt.Fprintf(d.w, "   ⇒ %s\n", digest)
	return nil
}

// ledgerScript shows the idempotency ledger: a keyed mutation runs once
// however often it is retried.
func (d *demo) ledgerScript() error {
	steps := []func() error{
		func() error {
			d.say("Ledger: stock a SKU (set_stock with expectedVersion 0 creates it at version 1)")
			return d.tool("20", "set_stock", `{"sku":"widget","quantity":10,"expectedVersion":0}`)
		},
		func() error {
			d.say("Reserve 3 with idempotency key order-1001: it runs (replayed=false)")
			return d.tool("21", "reserve_inventory", `{"sku":"widget","quantity":3,"idempotencyKey":"order-1001"}`)
		},
		func() error {
			d.say("The response was lost; the client retries with a new JSON-RPC id and the same key: replayed, nothing reserved twice")
			return d.tool("22", "reserve_inventory", `{"sku":"widget","quantity":3,"idempotencyKey":"order-1001"}`)
		},
		func() error {
			d.say("The same key with another quantity is refused, and nothing runs")
			return d.tool("23", "reserve_inventory", `{"sku":"widget","quantity":4,"idempotencyKey":"order-1001"}`)
		},
		func() error {
			d.say("The authoritative read: 7 left, version 2 (one reservation, not two)")
			return d.tool("24", "get_inventory", `{"sku":"widget"}`)
		},
		func() error {
			d.say("Reserving more than is left is a business failure, stored under its key: the retry gets the same answer")
			if err := d.tool("25", "reserve_inventory", `{"sku":"widget","quantity":50,"idempotencyKey":"order-1002"}`); err != nil {
				return err
			}
			return d.tool("26", "reserve_inventory", `{"sku":"widget","quantity":50,"idempotencyKey":"order-1002"}`)
		},
		func() error {
			d.say("A read-modify-write with a stale version is refused with the current one (optimistic concurrency)")
			return d.tool("27", "set_stock", `{"sku":"widget","quantity":100,"expectedVersion":1}`)
		},
		func() error {
			d.say("charge_account without a key: two JSON-RPC ids charge twice, and each result says retrySafe=false")
			if err := d.tool("28", "charge_account", `{"account":"alice","cents":500}`); err != nil {
				return err
			}
			return d.tool("29", "charge_account", `{"account":"alice","cents":500}`)
		},
		func() error {
			d.say("charge_account with a key: two ids, one charge")
			if err := d.tool("30", "charge_account", `{"account":"bob","cents":700,"idempotencyKey":"invoice-77"}`); err != nil {
				return err
			}
			return d.tool("31", "charge_account", `{"account":"bob","cents":700,"idempotencyKey":"invoice-77"}`)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// restartScript runs against a new server process: what committed before
// is still there, found by key.
func (d *demo) restartScript() error {
	d.say("Reconcile by key after the restart: order-1001 committed once, with its stored result")
	if err := d.tool("1", "lookup_operation", `{"tool":"reserve_inventory","idempotencyKey":"order-1001"}`); err != nil {
		return err
	}
	d.say("A late retry of order-1001 still replays; the stock is still 7")
	if err := d.tool("2", "reserve_inventory", `{"sku":"widget","quantity":3,"idempotencyKey":"order-1001"}`); err != nil {
		return err
	}
	return d.tool("3", "get_inventory", `{"sku":"widget"}`)
}
