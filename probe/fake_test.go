package probe_test

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// fakeBugs is the environment variable that makes the test binary a
// small stdio MCP server of its own, broken as it lists ("" for none,
// comma-separated):
//
//	answers-after-cancel  a cancelled call runs on and is answered
//	decreasing-progress   progress goes down once
//	progress-after-cancel a cancelled call goes on reporting progress, and is never answered
//	ignores-key           the mutation runs again for a key it has seen
//	no-deadline           a call that makes no progress runs forever
//	dies-on-stall         the process exits (status 3) when stall is called
//	floods-log            it writes notifications/message as fast as it can, from the start
//	random-bytes          it writes random bytes as fast as it can, and nothing else
//	endless-line          it writes one line that never ends
//
// It speaks both eras, and serves slow {steps, intervalMs} (a read that
// reports progress), stall (a call that never ends nor reports), count (a
// read of the counter) and bump {by, idempotencyKey} (a keyed mutation of
// the counter), written with nothing of mcprel's but the wire as the spec
// gives it: the probe must tell its bugs apart without mcprel's help.
const fakeBugs = "MCPREL_PROBE_FAKE_SERVER"

func fakeServer(bugs string) int {
	f := &fake{bugs: bugs, out: bufio.NewWriter(os.Stdout), calls: map[string]chan struct{}{}, keys: map[string]fakeRecord{}, unanswered: map[string]bool{}}
	switch {
	case f.bug("random-bytes"):
		go io.Copy(os.Stdout, rand.Reader)
	case f.bug("endless-line"):
		go func() {
			os.Stdout.WriteString(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`)
			io.Copy(os.Stdout, endless('x'))
		}()
	case f.bug("floods-log"):
		go func() {
			for i := 0; ; i++ {
				f.send(map[string]any{"method": "notifications/message", "params": map[string]any{"level": "info", "data": fmt.Sprintf("log line %d", i)}})
			}
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 16<<20)
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil {
			continue
		}
		f.handle(m.ID, m.Method, m.Params)
	}
	return 0
}

// endless is a reader of one byte, repeated forever.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

type fakeRecord struct {
	by     float64
	result string
}

type fake struct {
	bugs string
	mu   sync.Mutex
	out  *bufio.Writer

	calls map[string]chan struct{} // in flight, by id: closed when cancelled
	// unanswered are the calls cancelled that progress-after-cancel
	// runs on without an answer, by id.
	unanswered map[string]bool
	counter    float64
	keys       map[string]fakeRecord
}

func (f *fake) bug(name string) bool { return strings.Contains(f.bugs, name) }

func (f *fake) send(v map[string]any) {
	v["jsonrpc"] = "2.0"
	b, _ := json.Marshal(v)
	f.mu.Lock()
	f.out.Write(append(b, '\n'))
	f.out.Flush()
	f.mu.Unlock()
}

func (f *fake) result(id json.RawMessage, result any) {
	f.send(map[string]any{"id": id, "result": result})
}

func text(s string) map[string]any {
	return map[string]any{"content": []map[string]any{{"type": "text", "text": s}}}
}

var fakeTools = []map[string]any{
	{"name": "slow", "inputSchema": map[string]any{"type": "object"}},
	{"name": "stall", "inputSchema": map[string]any{"type": "object"}},
	{"name": "count", "inputSchema": map[string]any{"type": "object"}},
	{"name": "bump", "inputSchema": map[string]any{"type": "object"}},
}

func (f *fake) handle(id json.RawMessage, method string, params json.RawMessage) {
	switch method {
	case "initialize":
		f.result(id, map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": "fake", "version": "0"}})
	case "server/discover":
		f.result(id, map[string]any{"supportedVersions": []string{"2026-07-28"}, "capabilities": map[string]any{"tools": map[string]any{}},
			"serverInfo": map[string]any{"name": "fake", "version": "0"}, "resultType": "complete"})
	case "ping":
		f.result(id, map[string]any{})
	case "tools/list":
		f.result(id, map[string]any{"tools": fakeTools})
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(params, &p) != nil || f.bug("answers-after-cancel") {
			return
		}
		if f.bug("progress-after-cancel") {
			f.mu.Lock()
			f.unanswered[string(p.RequestID)] = true
			f.mu.Unlock()
			return
		}
		f.mu.Lock()
		if ch, ok := f.calls[string(p.RequestID)]; ok {
			close(ch)
			delete(f.calls, string(p.RequestID))
		}
		f.mu.Unlock()
	case "tools/call":
		if id != nil {
			f.call(id, params)
		}
	default:
		if id != nil {
			f.send(map[string]any{"id": id, "error": map[string]any{"code": -32601, "message": "no such method: " + method}})
		}
	}
}

func (f *fake) call(id json.RawMessage, params json.RawMessage) {
	var p struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
		Meta      struct {
			Token json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	json.Unmarshal(params, &p)
	cancelled := make(chan struct{})
	f.mu.Lock()
	f.calls[string(id)] = cancelled
	f.mu.Unlock()
	done := func() {
		f.mu.Lock()
		delete(f.calls, string(id))
		f.mu.Unlock()
	}
	num := func(k string, def float64) float64 {
		if v, ok := p.Arguments[k].(float64); ok {
			return v
		}
		return def
	}
	switch p.Name {
	case "slow":
		go func() {
			defer done()
			steps, every := int(num("steps", 10)), time.Duration(num("intervalMs", 50))*time.Millisecond
			for i := 1; i <= steps; i++ {
				select {
				case <-cancelled:
					return
				case <-time.After(every):
				}
				v := float64(i)
				if i == 3 && f.bug("decreasing-progress") {
					v = 1
				}
				if p.Meta.Token != nil {
					f.send(map[string]any{"method": "notifications/progress", "params": map[string]any{"progressToken": p.Meta.Token, "progress": v, "total": steps}})
				}
			}
			f.mu.Lock()
			unanswered := f.unanswered[string(id)]
			f.mu.Unlock()
			if !unanswered {
				f.result(id, text(fmt.Sprintf("counted to %d", steps)))
			}
		}()
	case "stall":
		if f.bug("dies-on-stall") {
			fmt.Fprintln(os.Stderr, "fake: a call that stalls is more than this server takes")
			os.Exit(3)
		}
		// Ended by its deadline, as a server should, unless it has none.
		go func() {
			defer done()
			limit := time.After(300 * time.Millisecond)
			if f.bug("no-deadline") {
				limit = nil
			}
			select {
			case <-cancelled:
			case <-limit:
				f.result(id, map[string]any{"isError": true, "content": []map[string]any{{"type": "text", "text": `{"code":"timeout"}`}}})
			}
		}()
	case "count":
		done()
		f.mu.Lock()
		n := f.counter
		f.mu.Unlock()
		f.result(id, map[string]any{"content": []map[string]any{{"type": "text", "text": fmt.Sprint(n)}}, "structuredContent": map[string]any{"n": n}})
	case "bump":
		done()
		by := num("by", 1)
		key, _ := p.Arguments["idempotencyKey"].(string)
		f.mu.Lock()
		rec, seen := f.keys[key]
		switch {
		case key != "" && seen && !f.bug("ignores-key") && rec.by != by:
			f.mu.Unlock()
			f.result(id, map[string]any{"isError": true, "content": []map[string]any{{"type": "text", "text": `{"code":"idempotency_conflict"}`}}})
			return
		case key != "" && seen && !f.bug("ignores-key"):
			f.mu.Unlock()
			f.result(id, text(rec.result))
			return
		}
		f.counter += by
		out := fmt.Sprintf("bumped to %v", f.counter)
		if key != "" {
			f.keys[key] = fakeRecord{by: by, result: out}
		}
		f.mu.Unlock()
		f.result(id, text(out))
	default:
		done()
		f.send(map[string]any{"id": id, "error": map[string]any{"code": -32602, "message": "no such tool"}})
	}
}
