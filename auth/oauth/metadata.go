package oauth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// WellKnown is the well-known path of Protected Resource Metadata
// (RFC 9728 §3).
const WellKnown = "/.well-known/oauth-protected-resource"

// MetadataURL returns where the Protected Resource Metadata of resource
// is: the well-known path inserted before resource's path (RFC 9728
// §3.1), https://h/.well-known/oauth-protected-resource/mcp for
// https://h/mcp.
func MetadataURL(resource string) string {
	u, err := url.Parse(resource)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + WellKnown + strings.TrimSuffix(u.EscapedPath(), "/")
}

// MetadataPaths are the paths the metadata is served at on the
// listener: the path-inserted one of the resource, the same for the
// listener's own endpoint path when it differs (a proxy in front that
// maps paths), and the root one, which clients try last. They are
// escaped, as MetadataURL's path is, so that each is a net/http.ServeMux
// pattern matching that one path: a space or a brace in the resource's
// path is neither a method nor a wildcard.
func (rs *ResourceServer) MetadataPaths(endpointPath string) []string {
	u, _ := url.Parse(rs.cfg.Resource)
	paths := []string{WellKnown + strings.TrimSuffix(u.EscapedPath(), "/")}
	endpoint := (&url.URL{Path: endpointPath}).EscapedPath()
	if p := WellKnown + strings.TrimSuffix(endpoint, "/"); p != paths[0] {
		paths = append(paths, p)
	}
	if paths[0] != WellKnown {
		paths = append(paths, WellKnown)
	}
	return paths
}

// ProtectedResourceMetadata is the document of RFC 9728 §2 the resource
// server serves.
type ProtectedResourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers,omitempty"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// Metadata returns the resource's Protected Resource Metadata.
func (rs *ResourceServer) Metadata() ProtectedResourceMetadata {
	return ProtectedResourceMetadata{
		Resource:               rs.cfg.Resource,
		AuthorizationServers:   rs.cfg.Issuers,
		ScopesSupported:        rs.Scopes(),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "mcprel",
	}
}

// MetadataHandler serves the Protected Resource Metadata to anyone: it
// is how a client that holds no token yet finds where to get one. A
// browser-based client reads it from another origin, so it is served
// with Access-Control-Allow-Origin: *; it holds nothing secret.
func (rs *ResourceServer) MetadataHandler() http.Handler {
	body, _ := json.Marshal(rs.Metadata())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		case http.MethodOptions:
			h.Set("Access-Control-Allow-Methods", "GET, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "MCP-Protocol-Version")
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			h.Set("Allow", "GET, HEAD, OPTIONS")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "max-age=300")
		w.Write(body)
	})
}
