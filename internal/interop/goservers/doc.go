// Package goservers tests mcprel's client against MCP servers nobody here
// wrote: the official Go SDK's (v1.8.0) and mcp-go's (v1.2.1), over stdio
// and Streamable HTTP, in each era they speak. It is a module of its own so
// that the peers' SDKs never enter mcprel's go.mod.
package goservers
