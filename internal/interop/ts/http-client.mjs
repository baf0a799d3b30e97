// Drives `mcprel serve --http` with an official TypeScript SDK client over
// Streamable HTTP and prints a JSON summary. http_test.go starts the server,
// runs this, and then checks from the server's own log what the server did.
//
// usage: node http-client.mjs <endpoint-url> <v1|v2>
//   v1: @modelcontextprotocol/sdk 1.32.2, initialize handshake and an
//       Mcp-Session-Id session (2025-11-25); an abort POSTs
//       notifications/cancelled
//   v2: @modelcontextprotocol/client 2.4.0 pinned to the stateless
//       2026-07-28 era; an abort closes the request's own stream
//
// The transport gets a fetch that records every HTTP exchange (the JSON-RPC
// message it carried, the MCP headers sent, the status and content type
// that came back); the summary's `http` lists them in order.

const [url, sdk] = process.argv.slice(2);
if (!url || !['v1', 'v2'].includes(sdk)) {
    console.error('usage: node http-client.mjs <endpoint-url> <v1|v2>');
    process.exit(2);
}

const MODERN = '2026-07-28';
const LEGACY = '2025-11-25';

async function loadSdk() {
    if (sdk === 'v1') {
        const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
        const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
        // v1's callTool takes a result schema before the options.
        return { Client, StreamableHTTPClientTransport, options: {}, callTool: (c, params, opts) => c.callTool(params, undefined, opts) };
    }
    const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
    // As over stdio: pinning makes the client probe with server/discover
    // and fail rather than fall back to initialize if the server does not
    // offer 2026-07-28. The transport takes no version option of its own for
    // this: it derives MCP-Protocol-Version, Mcp-Method and Mcp-Name from
    // each request's _meta envelope.
    const options = { versionNegotiation: { mode: { pin: MODERN } } };
    return { Client, StreamableHTTPClientTransport, options, callTool: (c, params, opts) => c.callTool(params, opts) };
}

const failures = [];
const expect = (ok, what) => { if (!ok) failures.push(what); };
const summary = { sdk, url, failures, clientErrors: [], errorsWhileClosing: [], lateProgress: [], resumeAfterAbort: [], http: [] };

// One record per HTTP exchange the transport makes. Each record also has a
// hidden `settled` promise, resolved once its fetch resolved or failed.
const sentWaiters = [];
const MCP_HEADERS = ['mcp-protocol-version', 'mcp-method', 'mcp-name', 'mcp-session-id', 'last-event-id'];
const recordingFetch = async (input, init = {}) => {
    const headers = new Headers(init.headers);
    const rec = { method: init.method ?? 'GET', headers: {} };
    for (const name of MCP_HEADERS) {
        if (headers.has(name)) rec.headers[name] = headers.get(name);
    }
    if (typeof init.body === 'string') {
        const msg = JSON.parse(init.body);
        if (Array.isArray(msg)) {
            rec.batch = msg.length; // neither SDK batches; say so if one does
        } else {
            if ('id' in msg) rec.id = msg.id;
            if (msg.method) rec.rpc = msg.method;
            if (msg.params?.name !== undefined) rec.name = msg.params.name;
            if (msg.params?.requestId !== undefined) rec.requestId = msg.params.requestId;
            if (msg.params?._meta?.progressToken !== undefined) rec.progressToken = msg.params._meta.progressToken;
            if (msg.params?.arguments !== undefined) rec.arguments = msg.params.arguments;
            if (msg.params?._meta?.['io.modelcontextprotocol/protocolVersion'] !== undefined) {
                rec.metaProtocolVersion = msg.params._meta['io.modelcontextprotocol/protocolVersion'];
            }
            if ('result' in msg || 'error' in msg) rec.response = true;
        }
    }
    const exchange = (async () => {
        try {
            const res = await fetch(input, init);
            rec.status = res.status;
            rec.contentType = res.headers.get('content-type');
            if (res.headers.has('mcp-session-id')) rec.sessionIdSet = res.headers.get('mcp-session-id');
            return res;
        } catch (err) {
            rec.fetchError = err?.name ?? String(err);
            throw err;
        }
    })();
    Object.defineProperty(rec, 'settled', { value: exchange.then(() => {}, () => {}) });
    summary.http.push(rec);
    for (const w of sentWaiters.splice(0)) w();
    return exchange;
};

// sent resolves with the first recorded exchange that matches, once its
// fetch has settled; ms only bounds a broken run.
async function sent(match, what, ms = 10_000) {
    let timer;
    const found = new Promise((resolve) => {
        const check = () => {
            const rec = summary.http.find(match);
            if (rec) resolve(rec);
            else sentWaiters.push(check);
        };
        check();
    });
    const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} was not sent within ${ms}ms`)), ms); });
    try {
        const rec = await Promise.race([found, timeout]);
        await Promise.race([rec.settled, timeout]);
        return rec;
    } finally {
        clearTimeout(timer);
    }
}

const { Client, StreamableHTTPClientTransport, options, callTool } = await loadSdk();
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
const client = new Client({ name: 'mcprel-interop', version: '0.0.0' }, options);
let closing = false;
// typescript-sdk#2580, in both SDKs and over HTTP as over stdio: a progress
// notification handled in the same turn as its request's response finds its
// handler retired and is reported here as an "unknown token" instead of
// reaching onprogress. Keep such notifications apart (the Go test judges
// from the server's side what was sent); any other client error fails the
// run, except while closing, when v1 reports its own aborted GET stream.
// v1 also reconnects (with Last-Event-ID, after the server's retry) the
// stream of a request it aborted itself, which the server refuses to
// resume: the request is over. Those reports, and only after the abort,
// are kept apart too.
client.onerror = (err) => {
    const late = /progress notification for an unknown token: (\{.*\})$/s.exec(String(err?.message));
    if (late) summary.lateProgress.push(JSON.parse(late[1]).params);
    else if (closing) summary.errorsWhileClosing.push(String(err));
    else if (summary.abortError && /Failed to reconnect SSE stream|Maximum reconnection attempts/.test(String(err?.message))) summary.resumeAfterAbort.push(String(err));
    else summary.clientErrors.push(String(err));
};

try {
    await client.connect(transport);
    summary.sessionId = transport.sessionId ?? null;
    summary.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null;
    summary.serverInfo = client.getServerVersion() ?? null;
    if (sdk === 'v1') {
        expect(typeof summary.sessionId === 'string' && summary.sessionId !== '', 'no Mcp-Session-Id after initialize');
        expect(summary.protocolVersion === LEGACY, `negotiated ${summary.protocolVersion}, want ${LEGACY}`);
    } else {
        expect(client.getProtocolEra() === 'modern', `era ${client.getProtocolEra()}, want modern`);
        expect(summary.protocolVersion === MODERN, `negotiated ${summary.protocolVersion}, want ${MODERN}`);
        expect(summary.sessionId === null, `a ${MODERN} client got session id ${summary.sessionId}`);
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
    // server may coalesce reports that come faster than its progress rate
    // limit (newest wins, flushed before the result), so fewer than 3 may
    // arrive; the Go test matches them against what the server wrote.
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
    const aborted = summary.http.filter((r) => r.rpc === 'tools/call' && r.arguments?.steps === 1000);
    expect(aborted.length === 1, `${aborted.length} POSTs of the long slow_count, want 1`);
    summary.abortedId = aborted[0]?.id ?? null;
    if (sdk === 'v1') {
        // v1 POSTs notifications/cancelled without waiting for it: the call
        // rejects at once. Let it arrive before going on, or a loaded
        // machine can see the session DELETEd (and the POST aborted by
        // close) before the server has read it. The server acts on the
        // notification before it answers 202.
        const note = await sent((r) => r.rpc === 'notifications/cancelled' && r.requestId === summary.abortedId,
            `notifications/cancelled for ${summary.abortedId}`);
        expect(note.status === 202, `notifications/cancelled answered ${note.status ?? note.fetchError}, want 202`);
    }

    await echo('still connected after the abort');
} catch (err) {
    failures.push(`unexpected error: ${err?.stack ?? err}`);
} finally {
    closing = true;
    try {
        // v1 leaves its session open on close; end it as the spec asks a
        // client that is done with it to (v2 has no session to end).
        if (sdk === 'v1' && transport.sessionId) await transport.terminateSession();
        await client.close();
    } catch (err) {
        failures.push(`close: ${err}`);
    }
}
expect(summary.clientErrors.length === 0, 'the client reported errors');

console.log(JSON.stringify(summary, null, 2));
process.exit(failures.length === 0 ? 0 : 1);
