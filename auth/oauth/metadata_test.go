package oauth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mcprel/mcprel/auth/oauth"
)

// The metadata is served at the URL its challenge names, whatever the
// resource's path holds: MetadataPaths are ServeMux patterns, so a
// space or a brace in the path must not make the listener panic when it
// mounts them, nor make a wildcard of a segment.
func TestMetadataPathsMount(t *testing.T) {
	for _, res := range []string{
		"https://mcp.example.com/mcp",
		"https://mcp.example.com/",
		"https://mcp.example.com/my%20tools/mcp",
		"https://mcp.example.com/%7Bid%7D/mcp",
	} {
		t.Run(res, func(t *testing.T) {
			rs, err := oauth.New(t.Context(), oauth.Config{Resource: res,
				Introspection: &oauth.Introspection{URL: "https://as.example.com/introspect", ClientID: "rs"}})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("mounting %q panicked: %v", rs.MetadataPaths("/mcp"), r)
					}
				}()
				for _, p := range rs.MetadataPaths("/mcp") {
					mux.Handle(p, rs.MetadataHandler())
				}
			}()
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, oauth.MetadataURL(res), nil))
			var prm oauth.ProtectedResourceMetadata
			json.Unmarshal(w.Body.Bytes(), &prm)
			if w.Code != http.StatusOK || prm.Resource != res {
				t.Fatalf("GET %s: %d %s", oauth.MetadataURL(res), w.Code, w.Body)
			}
			if res == "https://mcp.example.com/%7Bid%7D/mcp" {
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "https://mcp.example.com"+oauth.WellKnown+"/other/mcp", nil))
				if w.Code != http.StatusNotFound {
					t.Fatalf("a brace in the resource's path became a wildcard: %d", w.Code)
				}
			}
		})
	}
}
