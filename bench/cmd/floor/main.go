// Command floor is mcpbench's floor: the least any correct MCP server can
// do for an echo call on this machine. It decodes each request and encodes
// its answer with encoding/json, and nothing else — no lifecycle, no
// validation, no limits, no logging, no cancellation — over stdio or, with
// -http, over net/http. It is not a server anyone should run; it is the
// baseline a real server's throughput is a fraction of.
//
// It answers initialize (any era's handshake), server/discover (offering
// 2026-07-28 and 2025-11-25), tools/call of echo, and anything else with
// an empty result; notifications get no answer. Over
// HTTP it hands out one session id and accepts DELETE, so that a 2025
// client's session dance works, and answers with one JSON body.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

// request is what floor reads of a message.
type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string `json:"name"`
		Arguments struct {
			Text string `json:"text"`
		} `json:"arguments"`
		Meta struct {
			ProtocolVersion string `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
	} `json:"params"`
}

type text struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result"`
}

var initializeResult = map[string]any{
	"protocolVersion": "2025-11-25",
	"capabilities":    map[string]any{"tools": map[string]any{}},
	"serverInfo":      map[string]any{"name": "floor", "version": "1"},
}

// discoverResult lets a 2026-07-28 client choose that era.
var discoverResult = map[string]any{
	"resultType":        "complete",
	"supportedVersions": []string{"2026-07-28", "2025-11-25"},
	"capabilities":      map[string]any{"tools": map[string]any{}},
	"serverInfo":        map[string]any{"name": "floor", "version": "1"},
}

// answer decodes one message and encodes its answer; nil for a
// notification.
func answer(msg []byte) []byte {
	var req request
	if err := json.Unmarshal(msg, &req); err != nil || req.ID == nil {
		return nil
	}
	var result any = struct{}{}
	switch req.Method {
	case "initialize":
		result = initializeResult
	case "server/discover":
		result = discoverResult
	case "tools/call":
		// A 2026-07-28 request carries its version; its result must say
		// it is complete.
		resultType := ""
		if req.Params.Meta.ProtocolVersion != "" {
			resultType = "complete"
		}
		result = struct {
			ResultType string `json:"resultType,omitempty"`
			Content    []text `json:"content"`
		}{resultType, []text{{"text", req.Params.Arguments.Text}}}
	}
	out, _ := json.Marshal(response{"2.0", req.ID, result})
	return out
}

func main() {
	addr := flag.String("http", "", "serve HTTP on this address (e.g. 127.0.0.1:0) and print the endpoint URL on stdout")
	flag.Parse()
	if *addr != "" {
		if err := serveHTTP(*addr); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			if resp := answer(line); resp != nil {
				out.Write(resp)
				out.WriteByte('\n')
			}
		}
		if in.Buffered() == 0 || err != nil {
			out.Flush() // nothing more waiting: answer now
		}
		if err != nil {
			return
		}
	}
}

func serveHTTP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		resp := answer(body)
		if resp == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Mcp-Session-Id", "floor")
		w.Header().Set("Content-Type", "application/json")
		w.Write(resp)
	})
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	return http.Serve(ln, mux)
}
