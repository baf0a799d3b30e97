// Runs the interop scenario (../scenario/scenario.json) with an official
// TypeScript SDK client against `mcprel serve` and prints what the client
// returned for each step, as JSON on stdout. scenario_test.go judges it with
// the same judge as every other client, and checks the cancellation from
// the server's log.
//
// usage: node scenario-client.mjs <v1|v2> <legacy|modern> <stdio|http> <target>
//   v1: @modelcontextprotocol/sdk 1.32.2 (legacy only)
//   v2: @modelcontextprotocol/client 2.4.0: legacy is its default
//       initialize handshake, modern is pinned to 2026-07-28
//   target: for stdio, a shell command that runs the server; for http, the
//       endpoint URL
//
// A step the SDK throws on (a client-side schema check, say) is recorded as
// {error}: the judge counts it as a failure of the client to return what
// the server meant.
import { readFileSync } from 'node:fs';

const [sdk, era, transportKind, target] = process.argv.slice(2);
if (!['v1', 'v2'].includes(sdk) || !['legacy', 'modern'].includes(era) || !['stdio', 'http'].includes(transportKind) || !target) {
    console.error('usage: node scenario-client.mjs <v1|v2> <legacy|modern> <stdio|http> <target>');
    process.exit(2);
}
const script = JSON.parse(readFileSync(new URL('../scenario/scenario.json', import.meta.url)));

async function loadSdk() {
    if (sdk === 'v1') {
        const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
        const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
        const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
        return { Client, StdioClientTransport, StreamableHTTPClientTransport, options: {}, callTool: (c, params, opts) => c.callTool(params, undefined, opts) };
    }
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
    const options = era === 'modern' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {};
    return { Client, StdioClientTransport, StreamableHTTPClientTransport, options, callTool: (c, params, opts) => c.callTool(params, opts) };
}

const out = { sdk, era, transport: transportKind, steps: [], clientErrors: [], errorsWhileClosing: [] };
const { Client, StdioClientTransport, StreamableHTTPClientTransport, options, callTool } = await loadSdk();
// Over HTTP, the 2025-era SDKs POST notifications/cancelled without waiting
// for it. Keep each such POST's promise, so the driver can let it land
// before it goes on: closing the session first would end the call with the
// session instead of the cancellation.
const cancelPosts = [];
const trackingFetch = (input, init = {}) => {
    const res = fetch(input, init);
    if (typeof init.body === 'string' && init.body.includes('"notifications/cancelled"')) cancelPosts.push(res.catch(() => {}));
    return res;
};
const transport = transportKind === 'stdio'
    ? new StdioClientTransport({ command: 'sh', args: ['-c', target], env: { PATH: process.env.PATH, ...(process.env.GORACE && { GORACE: process.env.GORACE }) } })
    : new StreamableHTTPClientTransport(new URL(target), { fetch: trackingFetch });
const client = new Client({ name: `mcprel-interop-ts-${sdk}`, version: '0.0.0' }, options);
// Progress read in the same chunk as its response can reach the client
// after the call resolved (typescript-sdk#2580); keep it apart. While
// closing, the SDKs report aborting their own GET stream: an AbortError
// then is theirs, not a failure.
const late = [];
let closing = false;
client.onerror = (err) => {
    const m = /progress notification for an unknown token: (\{.*\})$/s.exec(String(err?.message));
    if (m) late.push(JSON.parse(m[1]).params);
    else if (closing && /AbortError/.test(String(err))) out.errorsWhileClosing.push(String(err));
    else out.clientErrors.push(String(err));
};

const call = async (step, opts = {}) => {
    const params = { name: step.tool, arguments: step.args };
    if (step.meta) params._meta = step.meta;
    try {
        return { result: await callTool(client, params, opts) };
    } catch (err) {
        return { error: { name: err?.name, code: err?.code, message: String(err?.message ?? err) } };
    }
};

try {
    await client.connect(transport);
    out.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? (era === 'legacy' ? '(v1 has no getter)' : null);
    const { tools } = await client.listTools();
    out.tools = tools.map((t) => t.name);
    for (const step of script.steps) {
        out.steps.push({ name: step.name, ...(await call(step)) });
    }

    const values = [];
    const progressed = await call(script.progress, { onprogress: (p) => values.push(p.progress) });
    out.progress = { ...progressed, values, late: late.map((p) => p.progress) };

    const abort = new AbortController();
    const seen = [];
    const cancelled = await call(script.cancel, {
        signal: abort.signal,
        timeout: 60_000,
        onprogress: (p) => { seen.push(p.progress); if (seen.length === 1) abort.abort(); },
    });
    out.cancel = { ...cancelled, progressBeforeAbort: seen.length > 0 };
    await Promise.all(cancelPosts); // the server acts on a cancellation before it answers 202
    out.afterCancel = await call(script.steps[0]);
} catch (err) {
    out.fatal = String(err?.stack ?? err);
} finally {
    closing = true;
    await client.close().catch((err) => out.clientErrors.push(`close: ${err}`));
}
console.log(JSON.stringify(out));
