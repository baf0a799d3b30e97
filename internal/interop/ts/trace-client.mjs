// Calls mcprel's echo tool with an official TypeScript SDK client over
// stdio, carrying a W3C traceparent in the request's _meta, as the
// OpenTelemetry conventions for MCP propagate trace context. trace_test.go
// starts an OTLP collector, runs this, and checks the server's span.
//
// usage: node trace-client.mjs <mcprel binary> <db path> <collector URL> <v1|v2> <traceparent>
//   v1: @modelcontextprotocol/sdk 1.32.2 (2025-11-25 handshake)
//   v2: @modelcontextprotocol/client 2.4.0 pinned to 2026-07-28

const [binary, db, collector, sdk, traceparent] = process.argv.slice(2);
if (!traceparent || !['v1', 'v2'].includes(sdk)) {
    console.error('usage: node trace-client.mjs <mcprel binary> <db path> <collector URL> <v1|v2> <traceparent>');
    process.exit(2);
}

let Client, StdioClientTransport, options = {};
if (sdk === 'v1') {
    ({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'));
    ({ StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js'));
} else {
    ({ Client } = await import('@modelcontextprotocol/client'));
    ({ StdioClientTransport } = await import('@modelcontextprotocol/client/stdio'));
    options = { versionNegotiation: { mode: { pin: '2026-07-28' } } };
}
const transport = new StdioClientTransport({
    command: binary,
    args: ['serve', '--stdio', '--db', db, '--otlp-endpoint', collector, '--log-level', 'warn'],
});
const client = new Client({ name: 'mcprel-trace', version: '0.0.0' }, options);
await client.connect(transport);
const result = await client.callTool({ name: 'echo', arguments: { text: 'traced' }, _meta: { traceparent } });
console.log(JSON.stringify({ text: result.content?.[0]?.text }));
// Closing stdin ends the server, which flushes its spans before it exits.
await client.close();
