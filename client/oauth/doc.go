// Package oauth is MCP authorization (2025-11-25 and 2026-07-28) from the
// client's side: a Client puts a server's access token on every request
// to it and, when the server refuses one, finds out where to sign in and
// does. Package client wraps its HTTP transport with one:
//
//	c, err := oauth.New("https://mcp.example.com/mcp", oauth.Options{
//		RedirectURL: "http://127.0.0.1:8976/callback",
//		Authorize:   openBrowserAndWaitForRedirect,
//		Store:       oauth.FileStore{},
//	})
//
// # Sign-in
//
// On a 401, the Client reads the server's Protected Resource Metadata
// (RFC 9728): from the challenge's resource_metadata, else the
// well-known URI with the server's path inserted, else the root one. Its
// resource must be the server's URL or a path-segment ancestor of it on
// the same scheme and host, as the TypeScript SDK's checkResourceAllowed
// has it (https://h/mcp stands for https://h/mcp/x, never for
// https://h/mcpx or another host), and is then sent byte for byte as the
// resource parameter (RFC 8707). The first authorization server it names, or the
// one Options.SelectAuthorizationServer picks, has its metadata fetched
// in MCP's order (RFC 8414 path-inserted, OpenID Connect path-inserted,
// OpenID Connect appended), and is refused unless its issuer is the one
// asked for and it offers PKCE with S256. A server with no such metadata
// anywhere, whose challenge names none, is taken for one of MCP
// 2025-03-26: its origin is its authorization server, with RFC 8414
// metadata at the origin's well-known URI (naming an issuer on that
// origin, its path free) or, failing that (404), the default endpoints
// /authorize, /token and /register, and its URL is the resource.
//
// The client is registered with it by pre-registered credentials
// (Options.ClientID), a Client ID Metadata Document the server accepts
// (Options.ClientMetadataURL), or Dynamic Client Registration (RFC
// 7591), in that order; registrations are kept per issuer and never
// offered to another, and a dynamic one is made again when
// Options.RedirectURL is not the URI it registered. Then the authorization code grant with PKCE,
// state and resource runs, the browser part being the program's
// (Options.Authorize); the response's iss is checked as RFC 9207 and MCP
// 2026-07-28 say. Scopes are the challenge's, else the metadata's
// scopes_supported, else none, with offline_access added to any when the
// authorization server lists it; a 403 insufficient_scope (or a 403
// with no error code whose challenge names a scope not held) re-authorizes
// with the scopes held and the challenged ones together, at most
// MaxStepUps times. GrantClientCredentials replaces all this with the
// client credentials grant, for a machine signing in as itself.
//
// # Tokens
//
// Access tokens are refreshed a minute before they expire, one refresh at
// a time, and on a 401; a refresh token the server rotates is saved to
// the Store before the access token that came with it is used, and one
// that is spent leads to a new sign-in. A Store keeps State per server:
// MemoryStore in memory, FileStore as 0600 files written atomically.
//
// # Bounds
//
// Each request to a metadata endpoint or the authorization server has
// Options.Timeout; Authorize has Options.SignInTimeout. No redirect is
// followed, no body read past MaxBodyBytes, and every URL that gets
// credentials or metadata must be HTTPS or loopback HTTP. Failures are
// *Error, naming the step; no message holds a token, code, verifier or
// secret.
package oauth
