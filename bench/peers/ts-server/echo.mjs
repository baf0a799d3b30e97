// An echo tool served over stdio by the official TypeScript SDK (v1,
// the 2025-11-25 era), as most MCP servers people run are written: the
// upstream mcpbench measures mcprel gateway in front of, against calling
// it directly (bench/README.md, The gateway).
//
//   node echo.mjs
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'ts-echo', version: '1.0.0' });
server.registerTool(
  'echo',
  { description: 'Echoes text back.', inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: 'text', text }] }),
);
await server.connect(new StdioServerTransport());
