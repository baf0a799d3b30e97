// Calls echo over stdio or Streamable HTTP with an official TypeScript SDK
// client, as clientbench's Go drivers do: 200 warm-up calls, n sequential calls, then n
// calls from conc concurrent callers on the one connection. Prints one JSON
// line: calls/s and this process's CPU (user+system) per call, per phase.
//
// usage: node calls.mjs v1|v2 <n> <conc> <server command> [args...]
//        node calls.mjs v1|v2 <n> <conc> <http://server URL>
//   v1: @modelcontextprotocol/sdk, the 2025-11-25 era (initialize handshake;
//       over HTTP, a session)
//   v2: @modelcontextprotocol/client, pinned to the 2026-07-28 era
// A server given as an http:// URL is spoken to over Streamable HTTP (the
// caller has started it); anything else is a command run over stdio.
const [sdk, nArg, concArg, command, ...args] = process.argv.slice(2);
const n = Number(nArg), conc = Number(concArg);
if (!['v1', 'v2'].includes(sdk) || !(n > 0) || !(conc > 0) || !command) {
    console.error('usage: node calls.mjs v1|v2 <n> <conc> <server command> [args...] | <http://server URL>');
    process.exit(2);
}
const overHTTP = /^https?:\/\//.test(command);

let Client, Transport, options = {};
if (sdk === 'v1') {
    ({ Client } = await import('@modelcontextprotocol/sdk/client/index.js'));
    ({ [overHTTP ? 'StreamableHTTPClientTransport' : 'StdioClientTransport']: Transport } =
        await import(overHTTP ? '@modelcontextprotocol/sdk/client/streamableHttp.js' : '@modelcontextprotocol/sdk/client/stdio.js'));
} else {
    ({ Client } = await import('@modelcontextprotocol/client'));
    ({ [overHTTP ? 'StreamableHTTPClientTransport' : 'StdioClientTransport']: Transport } =
        await import(overHTTP ? '@modelcontextprotocol/client' : '@modelcontextprotocol/client/stdio'));
    options = { versionNegotiation: { mode: { pin: '2026-07-28' } } };
}

const client = new Client({ name: 'clientbench', version: '0.0.0' }, options);
await client.connect(overHTTP ? new Transport(new URL(command)) : new Transport({ command, args, stderr: 'ignore' }));

const call = async (i) => {
    const res = await client.callTool({ name: 'echo', arguments: { text: `call ${i}` } });
    if (res.content?.length !== 1) throw new Error(`echo answered ${JSON.stringify(res)}`);
};
const cpuMicros = () => { const u = process.cpuUsage(); return u.user + u.system; };

for (let i = 0; i < 200; i++) await call(-1 - i);

let cpu0 = cpuMicros(), t0 = performance.now();
for (let i = 0; i < n; i++) await call(i);
const seqRate = n / ((performance.now() - t0) / 1000), seqCPU = (cpuMicros() - cpu0) / n;

let next = 0;
cpu0 = cpuMicros(); t0 = performance.now();
await Promise.all(Array.from({ length: conc }, async () => {
    while (next < n) await call(n + next++);
}));
const concRate = n / ((performance.now() - t0) / 1000), concCPU = (cpuMicros() - cpu0) / n;

console.log(JSON.stringify({ seqRate, seqCPU, concRate, concCPU }));
await client.close();
