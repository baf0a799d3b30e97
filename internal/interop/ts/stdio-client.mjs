// Drives `mcprel serve --stdio` with an official TypeScript SDK client and
// prints a JSON summary. interop_test.go runs it and then checks, from the
// server's own logs, what the server did.
//
// usage: node stdio-client.mjs <mcprel-binary> <out-dir> [v1|v2]
//   v1: @modelcontextprotocol/sdk 1.32.2, default connect (initialize handshake)
//   v2: @modelcontextprotocol/client 2.4.0 pinned to the stateless 2026-07-28 era
//
// Every server process the SDK spawns gets <out-dir>/server-<pid>/ holding
// stdin.log (what the client wrote), wire.log (what the server wrote on
// stdout) and stderr.log (the server's log). The v2 client spawns a
// throwaway sibling process for its server/discover probe, hence per-process
// directories; the summary's serverPid names the session's one.
import { resolve } from 'node:path';

const [binary, outDir, sdk = 'v1'] = process.argv.slice(2);
if (!binary || !outDir || !['v1', 'v2'].includes(sdk)) {
    console.error('usage: node stdio-client.mjs <mcprel-binary> <out-dir> [v1|v2]');
    process.exit(2);
}

// The tees record the wire byte for byte. `trap : TERM` makes sh wait for
// the pipeline when an SDK sends SIGTERM on close, so the server still sees
// EOF and exits on its own instead of being orphaned mid-write.
const WRAPPER = `trap : TERM
d="$OUT/server-$$"
mkdir "$d"
tee "$d/stdin.log" | "$MCPREL" serve --stdio --db "$d/mcprel.db" --log-format json 2>"$d/stderr.log" | tee "$d/wire.log"`;

const MODERN = '2026-07-28';

async function loadSdk() {
    if (sdk === 'v1') {
        const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
        const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
        // v1's callTool takes a result schema before the options.
        return { Client, StdioClientTransport, options: {}, callTool: (c, params, opts) => c.callTool(params, undefined, opts) };
    }
    const { Client } = await import('@modelcontextprotocol/client');
    const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
    // v2 defaults to the legacy handshake; pinning makes it probe with
    // server/discover and fail rather than fall back if the server does not
    // offer 2026-07-28.
    const options = { versionNegotiation: { mode: { pin: MODERN } } };
    return { Client, StdioClientTransport, options, callTool: (c, params, opts) => c.callTool(params, opts) };
}

const failures = [];
const expect = (ok, what) => { if (!ok) failures.push(what); };
const summary = { sdk, failures, clientErrors: [], lateProgress: [] };

const { Client, StdioClientTransport, options, callTool } = await loadSdk();
const transport = new StdioClientTransport({
    command: 'sh',
    args: ['-c', WRAPPER],
    // The SDK gives the server only a few variables of ours; GORACE lets
    // the test's -race server build skip its 1s sleep at exit.
    env: { MCPREL: resolve(binary), OUT: resolve(outDir), ...(process.env.GORACE && { GORACE: process.env.GORACE }) },
});
const client = new Client({ name: 'mcprel-interop', version: '0.0.0' }, options);
// typescript-sdk#2580, in both SDKs: notification handlers run a microtask
// late but responses are handled at once, so a progress notification read
// in the same chunk as its request's response finds its handler retired and
// is reported here as an "unknown token" instead of reaching onprogress.
// mcprel writes a count's last progress and its result back to back, so this
// hits about a third of runs. Keep such notifications apart (the Go test
// judges the wire); any other client error fails the run.
client.onerror = (err) => {
    const late = /progress notification for an unknown token: (\{.*\})$/s.exec(String(err?.message));
    if (late) summary.lateProgress.push(JSON.parse(late[1]).params);
    else summary.clientErrors.push(String(err));
};

try {
    await client.connect(transport);
    summary.serverPid = transport.pid;
    summary.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? null; // v1 has no getter
    summary.serverInfo = client.getServerVersion() ?? null;
    if (sdk === 'v2') {
        expect(client.getProtocolEra() === 'modern', `era ${client.getProtocolEra()}, want modern`);
        expect(summary.protocolVersion === MODERN, `negotiated ${summary.protocolVersion}, want ${MODERN}`);
    }

    const { tools } = await client.listTools();
    summary.tools = tools.map((t) => t.name);
    for (const name of ['echo', 'slow_count']) expect(summary.tools.includes(name), `tools/list lacks ${name}`);

    const echo = async (text) => {
        const res = await callTool(client, { name: 'echo', arguments: { text } });
        expect(res.content?.[0]?.type === 'text' && res.content[0].text === text, `echo ${JSON.stringify(text)} returned ${JSON.stringify(res.content)}`);
    };
    await echo(`hello from ${sdk}`);

    // A short count that finishes, reporting progress on the way.
    const progress = [];
    const counted = await callTool(client, { name: 'slow_count', arguments: { steps: 3, intervalMs: 20 } }, {
        onprogress: (p) => progress.push(p.progress),
    });
    summary.progress = progress;
    // Only the last value may have been lost to the SDK race above. The
    // server coalesces reports that come faster than its progress rate
    // limit (the newest goes out, before the result), so fewer than 3 may
    // arrive; the Go test matches them against the wire.
    const raced = summary.lateProgress.filter((p) => p.total === 3).map((p) => p.progress);
    const all = progress.concat(raced);
    expect(all.length >= 1 && all.length <= 3 && all.every((v, i) => i === 0 || v > all[i - 1]) && all.at(-1) === 3 && raced.length <= 1,
        `progress ${JSON.stringify(progress)} (+${JSON.stringify(raced)} dropped by the SDK), want increasing values ending at 3`);
    expect(counted.structuredContent?.counted === 3, `slow_count returned ${JSON.stringify(counted.structuredContent)}, want {counted: 3}`);

    // A long count, aborted as soon as it shows it is running. The timeout
    // only bounds a broken run; the abort comes long before it.
    const abort = new AbortController();
    const abortedProgress = [];
    const long = callTool(client, { name: 'slow_count', arguments: { steps: 1000, intervalMs: 50 } }, {
        signal: abort.signal,
        timeout: 30_000,
        onprogress: (p) => {
            abortedProgress.push(p.progress);
            if (abortedProgress.length === 1) abort.abort();
        },
    });
    try {
        const res = await long;
        failures.push(`aborted slow_count resolved: ${JSON.stringify(res)}`);
    } catch (err) {
        summary.abortError = { name: err?.name, code: err?.code, message: String(err?.message) };
        // Both SDKs wrap the signal's reason (an AbortError DOMException).
        expect(abort.signal.aborted && /AbortError/.test(String(err?.message)), `aborted slow_count rejected with ${err}, want an abort error`);
    }
    summary.abortedProgress = abortedProgress;

    await echo('still connected after the abort');
} catch (err) {
    failures.push(`unexpected error: ${err?.stack ?? err}`);
} finally {
    // close ends the server's stdin; the SDK escalates to SIGTERM only after
    // 2s, so a quick close means the server exited on EOF by itself.
    const started = performance.now();
    await client.close().catch((err) => failures.push(`close: ${err}`));
    summary.closeMs = Math.round(performance.now() - started);
    expect(summary.closeMs < 1500, `close took ${summary.closeMs}ms: the server did not exit on EOF`);
}
expect(summary.clientErrors.length === 0, 'the client reported errors');

console.log(JSON.stringify(summary, null, 2));
process.exit(failures.length === 0 ? 0 : 1);
