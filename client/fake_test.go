package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/jsonrpc"
	"github.com/mcprel/mcprel/mcp"
)

// fakeServer is a scripted MCP server over in-memory pipes: it answers
// server/discover as a 2026-07-28 server (or refuses it, legacy), answers
// initialize, and hands every other message to handle, which writes what
// the test wants the client to see.
type fakeServer struct {
	t      *testing.T
	out    *io.PipeWriter // to the client
	mu     sync.Mutex
	got    []jsonrpc.Message // every message the client sent, in order
	legacy bool
	handle func(m jsonrpc.Message)
}

func (f *fakeServer) send(format string, args ...any) {
	fmt.Fprintf(f.out, format+"\n", args...)
}

func (f *fakeServer) serve(in io.Reader) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		m, err := jsonrpc.Decode(line)
		if err != nil {
			f.t.Errorf("the client sent a broken frame %s: %v", line, err)
			continue
		}
		f.mu.Lock()
		f.got = append(f.got, m)
		f.mu.Unlock()
		switch {
		case m.Method == mcp.MethodDiscover && !f.legacy:
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}`, m.ID)
		case m.Method == mcp.MethodDiscover:
			f.send(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID)
		case m.Method == mcp.MethodInitialize:
			f.send(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}`, m.ID)
		case m.Method == mcp.NotificationInitialized:
		default:
			if f.handle != nil {
				f.handle(m)
			}
		}
	}
}

// sent returns the messages the client sent with method.
func (f *fakeServer) sent(method string) []jsonrpc.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []jsonrpc.Message
	for _, m := range f.got {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// dial connects a client to a new fake server.
func dial(t *testing.T, legacy bool, handle func(f *fakeServer, m jsonrpc.Message)) (*client.Client, *fakeServer) {
	t.Helper()
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	f := &fakeServer{t: t, out: fromServer, legacy: legacy}
	f.handle = func(m jsonrpc.Message) { handle(f, m) }
	go f.serve(toServer)
	c, err := client.Connect(context.Background(), toClient, fromClient, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); fromServer.Close() })
	return c, f
}

// progressToken reads a request's progress token.
func progressToken(m jsonrpc.Message) string {
	var p struct {
		Meta struct {
			ProgressToken string `json:"progressToken"`
		} `json:"_meta"`
	}
	json.Unmarshal(m.Params, &p)
	return p.Meta.ProgressToken
}

func progress(f *fakeServer, m jsonrpc.Message, value float64) {
	f.send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%q,"progress":%g}}`, progressToken(m), value)
}

func result(f *fakeServer, m jsonrpc.Message, text string) {
	f.send(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, m.ID, text)
}

func jsonUnmarshal(b []byte, v any) { json.Unmarshal(b, v) }

func name(m jsonrpc.Message) string {
	var p struct{ Name string }
	json.Unmarshal(m.Params, &p)
	return p.Name
}

func containsID(params []byte, id jsonrpc.ID) bool {
	var p mcp.CancelledParams
	return json.Unmarshal(params, &p) == nil && p.RequestID == id
}

func containsKey(params []byte, key string) bool {
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	json.Unmarshal(params, &p)
	_, ok := p.Meta[key]
	return ok
}

func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }
