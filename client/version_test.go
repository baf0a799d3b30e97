package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcprel/mcprel/client"
	"github.com/mcprel/mcprel/mcp"
)

// versionServer is a 2026-07-28 server as SEP-2575 has it refuse a
// version: the first refusals requests get CodeUnsupportedVersion listing
// supported (HTTP 400), the rest are served. It answers initialize too,
// so that a client that wrongly falls back to the handshake is seen doing
// it, and records every request it reads.
type versionServer struct {
	refusals  int
	supported []string

	mu  sync.Mutex
	got []seenRequest
}

// seenRequest is one request as the server read it: its method, its
// _meta, and (over HTTP) its MCP-Protocol-Version header.
type seenRequest struct {
	method string
	meta   map[string]json.RawMessage
	header string
}

// answer serves one message; "" for a notification.
func (s *versionServer) answer(frame []byte, header string) (status int, body string) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	json.Unmarshal(frame, &m)
	if m.ID == nil {
		return http.StatusAccepted, ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, seenRequest{method: m.Method, meta: m.Params.Meta, header: header})
	if m.Method != mcp.MethodInitialize && len(s.got) <= s.refusals {
		data, _ := json.Marshal(mcp.UnsupportedVersionData{Supported: s.supported, Requested: header})
		return http.StatusBadRequest, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32022,"message":"Unsupported protocol version","data":%s}}`, m.ID, data)
	}
	switch m.Method {
	case mcp.MethodDiscover:
		list, _ := json.Marshal(s.supported)
		return http.StatusOK, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","supportedVersions":%s,"capabilities":{"tools":{}}}}`, m.ID, list)
	case mcp.MethodInitialize:
		return http.StatusOK, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"v","version":"1"}}}`, m.ID)
	}
	return http.StatusOK, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"resultType":"complete","content":[{"type":"text","text":"ok"}]}}`, m.ID)
}

// requests returns what the server read, in order.
func (s *versionServer) requests() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *versionServer) methods() []string {
	var out []string
	for _, r := range s.requests() {
		out = append(out, r.method)
	}
	return out
}

// connectStdio connects a client to s over in-memory pipes.
func (s *versionServer) connectStdio(t *testing.T, opts *client.Options) (*client.Client, error) {
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	go func() {
		sc := bufio.NewScanner(toServer)
		for sc.Scan() {
			if _, body := s.answer(sc.Bytes(), ""); body != "" {
				fmt.Fprintln(fromServer, body)
			}
		}
	}()
	t.Cleanup(func() { fromServer.Close(); toServer.Close() })
	return client.Connect(context.Background(), toClient, fromClient, opts)
}

// connectHTTP connects a client to s over Streamable HTTP.
func (s *versionServer) connectHTTP(t *testing.T, opts *client.Options) (*client.Client, error) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		frame, _ := io.ReadAll(r.Body)
		status, body := s.answer(frame, r.Header.Get(mcp.HeaderProtocolVersion))
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(hs.Close)
	return client.DialHTTP(context.Background(), hs.URL, opts)
}

// versionTransports runs a test over stdio and over Streamable HTTP.
var versionTransports = []struct {
	name    string
	connect func(s *versionServer, t *testing.T, opts *client.Options) (*client.Client, error)
}{
	{"stdio", (*versionServer).connectStdio},
	{"http", (*versionServer).connectHTTP},
}

// A server that refuses the client's first choice of version, listing one
// the client speaks, is asked once more in it (SEP-2575), and the
// connection is a 2026-07-28 one: every request, the refused one
// included, carries the version, the client's capabilities and its info
// in _meta, and over HTTP the same version in MCP-Protocol-Version.
func TestRefusedVersionIsRetriedOnceWithAListedOne(t *testing.T) {
	for _, tr := range versionTransports {
		t.Run(tr.name, func(t *testing.T) {
			s := &versionServer{refusals: 1, supported: []string{mcp.Version20260728}}
			opts := &client.Options{
				Info:         mcp.Implementation{Name: "versioned", Version: "7"},
				Capabilities: mcp.ClientCapabilities{Roots: json.RawMessage(`{}`)},
			}
			c, err := tr.connect(s, t, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Era() != mcp.Modern || c.ProtocolVersion() != mcp.Version20260728 {
				t.Fatalf("era %v version %q, want modern %s", c.Era(), c.ProtocolVersion(), mcp.Version20260728)
			}
			if _, err := c.CallTool(context.Background(), "x", nil, nil); err != nil {
				t.Fatal(err)
			}
			if got, want := s.methods(), []string{mcp.MethodDiscover, mcp.MethodDiscover, mcp.MethodToolsCall}; !slices.Equal(got, want) {
				t.Fatalf("the server read %v, want %v: one retry of server/discover, no initialize", got, want)
			}
			for i, r := range s.requests() {
				var version string
				json.Unmarshal(r.meta[mcp.MetaProtocolVersion], &version)
				if version != mcp.Version20260728 {
					t.Errorf("request %d (%s): _meta protocolVersion %q, want %s", i, r.method, version, mcp.Version20260728)
				}
				if got := string(r.meta[mcp.MetaClientCapabilities]); got != `{"roots":{}}` {
					t.Errorf("request %d (%s): _meta clientCapabilities %s", i, r.method, got)
				}
				var info mcp.Implementation
				if json.Unmarshal(r.meta[mcp.MetaClientInfo], &info); info != opts.Info {
					t.Errorf("request %d (%s): _meta clientInfo %+v, want %+v", i, r.method, info, opts.Info)
				}
				if tr.name == "http" && r.header != version {
					t.Errorf("request %d (%s): MCP-Protocol-Version %q, _meta says %q", i, r.method, r.header, version)
				}
			}
		})
	}
}

// A server that lists no version the client speaks ends the connection
// with a *VersionError that names both sides, after one request: asking
// again, or trying the 2025 handshake, could not help.
func TestNoSharedVersionIsAVersionError(t *testing.T) {
	for _, tr := range versionTransports {
		t.Run(tr.name, func(t *testing.T) {
			s := &versionServer{refusals: 100, supported: []string{"2099-01-01"}}
			_, err := tr.connect(s, t, nil)
			var ve *client.VersionError
			if !errors.As(err, &ve) || ve.Requested != mcp.Version20260728 || !slices.Equal(ve.Supported, s.supported) {
				t.Fatalf("err %v (%T), want a *VersionError for %s listing %v", err, err, mcp.Version20260728, s.supported)
			}
			want := `client: the server refused protocol version 2026-07-28 and lists ["2099-01-01"], none of which this client speaks`
			if err.Error() != want {
				t.Fatalf("err %q, want %q", err, want)
			}
			if got := s.methods(); !slices.Equal(got, []string{mcp.MethodDiscover}) {
				t.Fatalf("the server read %v, want one server/discover", got)
			}
		})
	}
}

// A server that refuses again the version it listed gets no third
// request: the retry is one, and its refusal a *VersionError.
func TestVersionRefusedAgainIsNotRetriedTwice(t *testing.T) {
	for _, tr := range versionTransports {
		t.Run(tr.name, func(t *testing.T) {
			s := &versionServer{refusals: 100, supported: []string{mcp.Version20260728}}
			_, err := tr.connect(s, t, nil)
			var ve *client.VersionError
			if !errors.As(err, &ve) || !strings.Contains(err.Error(), "which it lists as supported") {
				t.Fatalf("err %v (%T), want a *VersionError for a listed version refused", err, err)
			}
			if got := s.methods(); !slices.Equal(got, []string{mcp.MethodDiscover, mcp.MethodDiscover}) {
				t.Fatalf("the server read %v, want exactly two server/discover", got)
			}
		})
	}
}

// A refusal that lists only handshake versions the client speaks leads
// to initialize when the era is left to negotiation, and to a
// *VersionError when the caller asked for the 2026 era.
func TestRefusalListingOnlyHandshakeVersions(t *testing.T) {
	for _, tr := range versionTransports {
		t.Run(tr.name, func(t *testing.T) {
			s := &versionServer{refusals: 100, supported: []string{mcp.Version20251125}}
			c, err := tr.connect(s, t, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			if c.Era() != mcp.Legacy || c.ProtocolVersion() != mcp.Version20251125 {
				t.Fatalf("era %v version %q, want legacy %s", c.Era(), c.ProtocolVersion(), mcp.Version20251125)
			}
			if got := s.methods(); !slices.Equal(got[:2], []string{mcp.MethodDiscover, mcp.MethodInitialize}) {
				t.Fatalf("the server read %v, want server/discover then initialize", got)
			}

			s = &versionServer{refusals: 100, supported: []string{mcp.Version20251125}}
			_, err = tr.connect(s, t, &client.Options{Era: mcp.Modern})
			var ve *client.VersionError
			if !errors.As(err, &ve) {
				t.Fatalf("err %v (%T), want a *VersionError", err, err)
			}
			if got := s.methods(); !slices.Equal(got, []string{mcp.MethodDiscover}) {
				t.Fatalf("the server read %v, want one server/discover", got)
			}
		})
	}
}
