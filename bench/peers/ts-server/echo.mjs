// An echo tool served by the official TypeScript SDK (v1, the 2025-11-25
// era), as most MCP servers people run are written: the upstream mcpbench
// measures mcprel gateway in front of, against calling it directly
// (bench/README.md, The gateway).
//
//   node echo.mjs              over stdio
//   node echo.mjs --http PORT  over Streamable HTTP on 127.0.0.1:PORT/mcp,
//                              a session per initialize, as the SDK's
//                              examples serve it
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

function echoServer() {
  const server = new McpServer({ name: 'ts-echo', version: '1.0.0' });
  server.registerTool(
    'echo',
    { description: 'Echoes text back.', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text }] }),
  );
  return server;
}

const httpFlag = process.argv.indexOf('--http');
if (httpFlag < 0) {
  await echoServer().connect(new StdioServerTransport());
} else {
  const port = Number(process.argv[httpFlag + 1]);
  if (!Number.isInteger(port) || port <= 0) {
    console.error('usage: node echo.mjs [--http PORT]');
    process.exit(2);
  }
  const sessions = new Map();
  createServer(async (req, res) => {
    if (new URL(req.url, 'http://localhost').pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    const id = req.headers['mcp-session-id'];
    let transport = id && sessions.get(id);
    if (!transport) {
      if (id || req.method !== 'POST') {
        res.writeHead(404).end();
        return;
      }
      // No session yet: the transport refuses anything but an initialize.
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => sessions.set(sid, transport),
      });
      transport.onclose = () => sessions.delete(transport.sessionId);
      await echoServer().connect(transport);
    }
    await transport.handleRequest(req, res);
  }).listen(port, '127.0.0.1');
}
