package client_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/mcprel/mcprel/internal/mcptest"
)

// posted is what a scripted HTTP server reads of a POSTed message: a
// request or notification has a method, the answer to the server's own
// request has a result.
type posted struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
}

func readPosted(r *http.Request) posted {
	body, _ := io.ReadAll(r.Body)
	var m posted
	json.Unmarshal(body, &m)
	return m
}

// answerInitialize writes a 2025-11-25 initialize result for the server
// called name.
func answerInitialize(w http.ResponseWriter, id json.RawMessage, name string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":%q,"version":"1"}}}`, id, name)
}

// servePipe serves h on an in-memory network, so that a synctest bubble
// holds both ends, and returns the HTTP client that reaches it.
func servePipe(t *testing.T, h http.Handler) *http.Client {
	network := mcptest.NewPipeNetwork()
	hs := &http.Server{Handler: h}
	go hs.Serve(network)
	t.Cleanup(func() { hs.Close(); network.Close() })
	return network.Client()
}
