package mcp

// The HTTP headers of the Streamable HTTP transport, named once for the
// server's transport, the client and every tool that speaks the wire, so
// that none of them retypes (and misspells) one. Header names are
// case-insensitive; these are the spellings the specification uses.
const (
	// HeaderSessionID carries a 2025-11-25 session's id.
	HeaderSessionID = "Mcp-Session-Id"
	// HeaderProtocolVersion carries the protocol version on every request
	// after the first (2025-11-25) or on every request (2026-07-28).
	HeaderProtocolVersion = "Mcp-Protocol-Version"
	// HeaderMethod and HeaderName mirror a 2026-07-28 request's method and,
	// for tools/call, prompts/get and resources/read, what it names, so
	// that a proxy can route without reading the body.
	HeaderMethod = "Mcp-Method"
	HeaderName   = "Mcp-Name"
	// HeaderParamPrefix starts the headers that mirror a tool's arguments
	// annotated for it (Mcp-Param-NAME).
	HeaderParamPrefix = "Mcp-Param-"
	// HeaderLastEventID resumes a 2025-11-25 SSE stream after the event
	// it names (the SSE standard's header).
	HeaderLastEventID = "Last-Event-ID"
)
