// Package mcp holds the Model Context Protocol's wire types and rules for both
// protocol eras mcprel serves: the stateless 2026-07-28 revision, where every
// request carries its version and capabilities in _meta, and the
// initialize-based 2025-11-25, 2025-06-18 and 2025-03-26 revisions that most
// deployed clients still speak.
//
// It is pure data: method names, _meta keys, error codes, params and results,
// and version negotiation. Nothing here does I/O or knows about transports.
//
// Keys mcprel adds to _meta live under its own prefix, MetaPrefix
// ("dev.mcprel/"); prefixes whose second label is "modelcontextprotocol" or
// "mcp" are reserved by the specification.
package mcp
