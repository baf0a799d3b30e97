// An MCP server built with the official TypeScript SDK (1.32.2) over
// stdio, for mcprel's client to be tested against (ts_server_test.go):
// echo, progress (steps reports, intervalMs apart) and wait (blocks until
// cancelled, then says so on stderr).
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

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
server.registerTool('wait', {}, async (extra) => {
    console.error('handler-started wait');
    await new Promise((resolve) => extra.signal.addEventListener('abort', resolve));
    console.error('handler-cancelled wait');
    return { content: [] };
});
await server.connect(new StdioServerTransport());
