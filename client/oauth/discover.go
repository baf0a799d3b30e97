package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// resourceMetadata is Protected Resource Metadata (RFC 9728 section 2),
// the members the client uses.
type resourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// serverMetadata is authorization server metadata (RFC 8414 section 2),
// the members the client uses.
type serverMetadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported"`
	IssParameterSupported             bool     `json:"authorization_response_iss_parameter_supported"`
}

// discovery is what a 401 or 403 leads to: the resource's metadata and
// the authorization server chosen from it.
type discovery struct {
	resource string // the metadata's resource, byte for byte
	scopes   []string
	issuer   string
	as       serverMetadata
}

const (
	wellKnownResource = "/.well-known/oauth-protected-resource"
	wellKnownOAuth    = "/.well-known/oauth-authorization-server"
	wellKnownOpenID   = "/.well-known/openid-configuration"
)

// resourceMetadataURLs are where the server's Protected Resource Metadata
// may be, in the order MCP has clients try them: the challenge's
// resource_metadata, the well-known URI with the server's path inserted
// (RFC 9728 section 3.1), the root one.
func resourceMetadataURLs(server *url.URL, fromHeader string) []string {
	var out []string
	if fromHeader != "" {
		out = append(out, fromHeader)
	}
	base := server.Scheme + "://" + server.Host
	if p := strings.TrimSuffix(server.EscapedPath(), "/"); p != "" {
		out = append(out, base+wellKnownResource+p)
	}
	return append(out, base+wellKnownResource)
}

// serverMetadataURLs are where an issuer's metadata may be, in MCP's
// order: RFC 8414 with the path inserted, OpenID Connect with the path
// inserted, OpenID Connect appended; for an issuer without a path, RFC
// 8414 then OpenID Connect.
func serverMetadataURLs(issuer *url.URL) []string {
	base := issuer.Scheme + "://" + issuer.Host
	p := strings.TrimSuffix(issuer.EscapedPath(), "/")
	if p == "" {
		return []string{base + wellKnownOAuth, base + wellKnownOpenID}
	}
	return []string{base + wellKnownOAuth + p, base + wellKnownOpenID + p, base + p + wellKnownOpenID}
}

// resourceAllowed reports whether the metadata's resource may stand for
// the server at server: same scheme and host (compared as URLs compare
// them, without case) and a path that is the server's or an ancestor of
// it on a segment boundary, as the TypeScript SDK's checkResourceAllowed
// has it: https://h/mcp covers https://h/mcp and https://h/mcp/x, not
// https://h/mcpx. RFC 9728 section 3.3 asks for identity with the URL
// the metadata was found from; the MCP server's URL is under it.
func resourceAllowed(resource string, server *url.URL) bool {
	r, err := url.Parse(resource)
	if err != nil || !r.IsAbs() || r.Fragment != "" || strings.Contains(resource, "#") {
		return false
	}
	if !strings.EqualFold(r.Scheme, server.Scheme) || !strings.EqualFold(r.Host, server.Host) {
		return false
	}
	want := strings.TrimSuffix(r.EscapedPath(), "/") + "/"
	have := strings.TrimSuffix(server.EscapedPath(), "/") + "/"
	return strings.HasPrefix(have, want)
}

// discover finds the resource's metadata and its authorization server's,
// checking each as MCP requires.
func (c *Client) discover(ctx context.Context, fromHeader string) (*discovery, error) {
	var prm resourceMetadata
	var err error
	for _, u := range resourceMetadataURLs(c.server, fromHeader) {
		if _, err = checkEndpoint("the resource metadata URL", u); err != nil {
			break
		}
		prm = resourceMetadata{}
		if err = c.getJSON(ctx, u, &prm); err == nil {
			break
		}
		if _, notFound := errors.AsType[*errNotFound](err); !notFound {
			break
		}
	}
	if _, notFound := errors.AsType[*errNotFound](err); notFound && fromHeader == "" {
		// No metadata anywhere, and the challenge names none: a server of
		// MCP 2025-03-26, which had none.
		return c.discoverLegacy(ctx)
	}
	if err != nil {
		return nil, stepErr(StepMetadata, fmt.Errorf("no protected resource metadata: %w", err))
	}
	if !resourceAllowed(prm.Resource, c.server) {
		return nil, stepErr(StepResource, fmt.Errorf("the protected resource metadata names resource %q, not this server (%s)",
			printable(prm.Resource, 200), c.resource))
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, stepErr(StepMetadata, errors.New("the protected resource metadata names no authorization server"))
	}
	issuer := prm.AuthorizationServers[0]
	if c.opts.SelectAuthorizationServer != nil {
		if issuer, err = c.opts.SelectAuthorizationServer(slices.Clone(prm.AuthorizationServers)); err != nil {
			return nil, stepErr(StepMetadata, fmt.Errorf("choosing an authorization server: %w", err))
		}
		if !slices.Contains(prm.AuthorizationServers, issuer) {
			return nil, stepErr(StepMetadata, fmt.Errorf("SelectAuthorizationServer chose %q, which the metadata does not name", printable(issuer, 200)))
		}
	}
	iu, err := checkEndpoint("the authorization server", issuer)
	if err != nil {
		return nil, stepErr(StepMetadata, err)
	}
	if iu.RawQuery != "" || iu.Fragment != "" {
		return nil, stepErr(StepMetadata, fmt.Errorf("issuer %s has a query or fragment", redact(iu)))
	}
	var md serverMetadata
	for _, u := range serverMetadataURLs(iu) {
		md = serverMetadata{}
		if err = c.getJSON(ctx, u, &md); err == nil {
			break
		}
		if _, notFound := errors.AsType[*errNotFound](err); !notFound {
			break
		}
	}
	if err != nil {
		return nil, stepErr(StepMetadata, fmt.Errorf("no metadata for authorization server %s: %w", issuer, err))
	}
	if err := c.checkServerMetadata(issuer, &md); err != nil {
		return nil, err
	}
	return &discovery{resource: prm.Resource, scopes: prm.ScopesSupported, issuer: issuer, as: md}, nil
}

// discoverLegacy is discovery as MCP 2025-03-26 had it, for a server
// without Protected Resource Metadata: the server's origin is its
// authorization server, whose RFC 8414 metadata is at the origin's
// well-known URI or, when there is none, whose endpoints are the
// default ones, /authorize, /token and /register at the origin (with
// PKCE, which that revision required). The resource parameter is the
// server's URL.
//
// That revision located the metadata by the origin, not by an issuer
// identifier, so the document may name an issuer with a path (some
// servers mount their authorization server under /oauth): one on the
// server's own origin is taken as the issuer, for RFC 9207 and the
// registrations; one elsewhere is refused.
func (c *Client) discoverLegacy(ctx context.Context) (*discovery, error) {
	origin := c.server.Scheme + "://" + c.server.Host
	issuer := origin
	var md serverMetadata
	err := c.getJSON(ctx, origin+wellKnownOAuth, &md)
	if _, notFound := errors.AsType[*errNotFound](err); notFound {
		md = serverMetadata{
			Issuer:                        issuer,
			AuthorizationEndpoint:         origin + "/authorize",
			TokenEndpoint:                 origin + "/token",
			RegistrationEndpoint:          origin + "/register",
			CodeChallengeMethodsSupported: []string{"S256"},
		}
	} else if err != nil {
		return nil, stepErr(StepMetadata, fmt.Errorf("no protected resource metadata, and no metadata for the server as its own authorization server: %w", err))
	} else if strings.HasPrefix(md.Issuer, origin+"/") && !strings.ContainsAny(md.Issuer, "?#") {
		issuer = md.Issuer
	}
	if err := c.checkServerMetadata(issuer, &md); err != nil {
		return nil, err
	}
	return &discovery{resource: c.resource, issuer: issuer, as: md}, nil
}

// checkServerMetadata checks the metadata of the authorization server
// issuer as MCP requires: its own issuer, endpoints the client may send
// credentials to, and PKCE with S256.
func (c *Client) checkServerMetadata(issuer string, md *serverMetadata) error {
	// RFC 8414 section 3.3: the issuer, compared as strings.
	if md.Issuer != issuer {
		return stepErr(StepIssuer, fmt.Errorf("the metadata of authorization server %s names issuer %q", issuer, printable(md.Issuer, 200)))
	}
	if _, err := checkEndpoint("the token endpoint", md.TokenEndpoint); err != nil {
		return stepErr(StepMetadata, err)
	}
	if c.opts.GrantType == GrantAuthorizationCode {
		if _, err := checkEndpoint("the authorization endpoint", md.AuthorizationEndpoint); err != nil {
			return stepErr(StepMetadata, err)
		}
		// MCP: refuse to proceed unless S256 is offered, the member's
		// absence included.
		if !slices.Contains(md.CodeChallengeMethodsSupported, "S256") {
			return stepErr(StepPKCE, fmt.Errorf("authorization server %s does not offer PKCE with S256 (code_challenge_methods_supported %v)",
				issuer, md.CodeChallengeMethodsSupported))
		}
		if md.RegistrationEndpoint != "" {
			if _, err := checkEndpoint("the registration endpoint", md.RegistrationEndpoint); err != nil {
				return stepErr(StepMetadata, err)
			}
		}
	}
	return nil
}
