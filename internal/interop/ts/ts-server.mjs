// An MCP server built with the official TypeScript SDK (1.32.2) over
// stdio, for mcprel's client to be tested against (ts_server_test.go):
// echo, progress (steps reports, intervalMs apart) and wait (blocks until
// cancelled, then says so on stderr).
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

// With --http the server speaks Streamable HTTP (2025 sessions) on a free
// loopback port, printing its URL on stdout; otherwise stdio.
function newServer() {
const server = new McpServer({ name: 'ts-server', version: '1.0.0' });
server.registerTool('echo', { inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text }] }));
server.registerTool('progress', { inputSchema: { steps: z.number(), intervalMs: z.number() } },
    async ({ steps, intervalMs }, extra) => {
        const token = extra._meta?.progressToken;
        for (let i = 1; i <= steps; i++) {
            await new Promise((resolve, reject) => {
                const t = setTimeout(resolve, intervalMs);
                extra.signal.addEventListener('abort', () => { clearTimeout(t); reject(new Error('aborted')); });
            });
            if (token !== undefined) {
                await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: steps } });
            }
        }
        return { content: [{ type: 'text', text: `${steps} steps` }] };
    });
// ask elicits a name from the client in the middle of the call, and says
// what it got back.
server.registerTool('ask', {}, async () => {
    const answer = await server.server.elicitInput({
        message: 'What is your name?',
        requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
    });
    return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
});
server.registerTool('wait', {}, async (extra) => {
    console.error('handler-started wait');
    await new Promise((resolve) => extra.signal.addEventListener('abort', resolve));
    console.error('handler-cancelled wait');
    return { content: [] };
});
return server;
}

if (process.argv.includes('--http')) {
    const sessions = new Map();
    const http = createServer(async (req, res) => {
        let body = '';
        for await (const chunk of req) body += chunk;
        const parsed = body ? JSON.parse(body) : undefined;
        const sid = req.headers['mcp-session-id'];
        let transport = sid ? sessions.get(sid) : undefined;
        if (!transport && parsed?.method === 'initialize') {
            transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                onsessioninitialized: (id) => sessions.set(id, transport),
            });
            await newServer().connect(transport);
        }
        if (!transport) {
            res.writeHead(404, { 'Content-Type': 'application/json' });
            res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no such session' }, id: null }));
            return;
        }
        await transport.handleRequest(req, res, parsed);
    });
    http.listen(0, '127.0.0.1', () => console.log(`http://127.0.0.1:${http.address().port}/mcp`));
} else {
    await newServer().connect(new StdioServerTransport());
}
