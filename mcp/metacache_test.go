package mcp

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// A MetaCache answers what ParseRequestMeta answers, for repeated,
// changed, malformed and oversized _meta alike, and keeps at most one
// bounded _meta.
func TestMetaCacheAgreesWithParseRequestMeta(t *testing.T) {
	caps := `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}`
	params := []string{
		`{"name":"echo","_meta":{` + caps + `}}`,
		`{"name":"other","_meta":{` + caps + `}}`, // the same _meta: from the cache
		`{"_meta":{` + caps + `,"progressToken":7}}`,
		`{"_meta":{` + caps + `}}`,
		`{"_meta":{"io.modelcontextprotocol/protocolVersion":3}}`, // malformed
		`{"_meta":{"io.modelcontextprotocol/protocolVersion":3}}`,
		`{"_meta":null}`, `{}`, `[1]`, `{"_meta":"x"}`, ``,
		`{"_meta":{` + caps + `,"x":"` + strings.Repeat("a", maxCachedMeta) + `"}}`,
	}
	var c MetaCache
	for _, p := range params {
		want, wantRaw, wantErr := ParseRequestMeta([]byte(p))
		got, gotRaw, gotErr := c.Parse("t", []byte(p))
		if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
			t.Fatalf("%.60s: error %v, want %v", p, gotErr, wantErr)
		}
		if !bytes.Equal(gotRaw, wantRaw) {
			t.Fatalf("%.60s: raw %s, want %s", p, gotRaw, wantRaw)
		}
		if gotErr == nil && (deref(got.ProtocolVersion) != deref(want.ProtocolVersion) ||
			(got.ClientCapabilities == nil) != (want.ClientCapabilities == nil) ||
			(got.ProgressToken == nil) != (want.ProgressToken == nil)) {
			t.Fatalf("%.60s: parsed %+v, want %+v", p, got, want)
		}
		if len(c.raw) > maxCachedMeta {
			t.Fatalf("the cache holds %d bytes", len(c.raw))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// The raw _meta returned is the request's own bytes, never the cache's
// copy, so it lives and dies with its request.
func TestMetaCacheReturnsTheRequestsOwnBytes(t *testing.T) {
	var c MetaCache
	p := []byte(`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`)
	c.Parse("t", p)
	q := bytes.Clone(p)
	_, raw, _ := c.Parse("t", q)
	if &raw[0] != &q[9] {
		t.Fatal("the raw _meta is not a subslice of the request's params")
	}
}

// Concurrent requests with different _meta each get their own.
func TestMetaCacheUnderConcurrency(t *testing.T) {
	var c MetaCache
	var wg sync.WaitGroup
	for _, v := range []string{"2026-07-28", "2025-11-25", "x"} {
		wg.Go(func() {
			for range 500 {
				m, _, err := c.Parse("t", []byte(`{"_meta":{"io.modelcontextprotocol/protocolVersion":"`+v+`"}}`))
				if err != nil || deref(m.ProtocolVersion) != v {
					t.Errorf("got %v, %v; want %s", deref(m.ProtocolVersion), err, v)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Two tenants that send the same _meta never share its parse: what one's
// handler could write through it, the other never sees.
func TestMetaCacheKeepsTenantsApart(t *testing.T) {
	var c MetaCache
	p := []byte(`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"x","version":"1"}}}`)
	alice, _, _ := c.Parse("alice", p)
	again, _, _ := c.Parse("alice", p)
	if again.ClientInfo != alice.ClientInfo {
		t.Fatal("a tenant's repeated _meta was parsed again")
	}
	bob, _, _ := c.Parse("bob", p)
	if bob.ClientInfo == alice.ClientInfo {
		t.Fatal("bob was given alice's parse")
	}
}
