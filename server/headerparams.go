package server

import (
	"github.com/mcprel/mcprel/mcp"
	"github.com/mcprel/mcprel/server/conn"
)

// headerParam is a tool argument mirrored into an HTTP header
// (conn.HeaderParam): its schema carries "x-mcp-header".
type headerParam = conn.HeaderParam

// HeaderParams returns the header-mirrored arguments of a tool, or nil.
func (ss *session) HeaderParams(tool string) []headerParam {
	if rt := ss.srv.lookupTool(tool); rt != nil {
		return rt.headers
	}
	return nil
}

// findHeaderParams collects and checks the x-mcp-header annotations of an
// input schema, by the rules package mcp keeps for client and server alike.
var findHeaderParams = mcp.FindHeaderParams
