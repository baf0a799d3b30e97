// Connects an official TypeScript SDK client, with the SDK's own OAuth
// support, to an MCP server protected by OAuth (an MCP authorization spec
// resource server), lists its tools, calls one, and prints a JSON summary
// on stdout. Exits 1 if anything failed (the summary's `failures` and
// `error` say what), 2 on a usage mistake.
//
// usage: node oauth-client.mjs <v1|v2> <client_credentials|authorization_code> <mcp-url>
//          [--client-id ID] [--client-secret SECRET] [--issuer URL]
//          [--scope SCOPES] [--era legacy|modern] [--tool NAME] [--args JSON]
//   v1: @modelcontextprotocol/sdk 1.32.2, 2025-11-25 (initialize, session)
//   v2: @modelcontextprotocol/client 2.4.0, pinned to 2026-07-28 (--era
//       modern, its default here), or with its own default, 2025-11-25
//       (--era legacy)
//   client_credentials: the SDK's ClientCredentialsProvider (its auth
//       extensions, SEP-1046) with --client-id and --client-secret
//       (client_secret_basic); --issuer, if given, is its expectedIssuer,
//       --scope its configured scope. v1 (1.32.2) asks the token endpoint
//       for that configured scope only, never the one the server's
//       challenge or metadata names (v2 uses those), so a server that
//       requires scopes needs --scope with v1.
//   authorization_code: an OAuthClientProvider for authorization code with
//       PKCE, redirect URI http://127.0.0.1:<port>/callback (nothing
//       listens there). With --client-id it is a pre-registered public
//       client; without, the SDK registers one (RFC 7591). Its
//       redirectToAuthorization plays the browser: it fetches the
//       authorization URL and follows the authorization server's
//       redirects (keeping its cookies) until one points at the redirect
//       URI, then the script hands the code (and, with v2, the RFC 9207
//       iss) to transport.finishAuth and connects again.
//   --tool/--args: the tool to call (default echo, {"text": "hello ..."}).
//
// Discovery is the SDK's: the first request goes without a token, the
// 401's WWW-Authenticate names the protected resource metadata, which
// names the authorization server. Every HTTP exchange the SDK made, MCP
// and OAuth alike, is in the summary's `http` (method, URL without query,
// status, and the WWW-Authenticate of a 401 or 403), and `token` has the
// claims of the access token the client ended up sending (decoded, not
// verified: the server verifies).

import { parseArgs } from 'node:util';

const { values: opts, positionals } = parseArgs({
    allowPositionals: true,
    options: {
        'client-id': { type: 'string' },
        'client-secret': { type: 'string' },
        issuer: { type: 'string' },
        scope: { type: 'string' },
        era: { type: 'string' },
        tool: { type: 'string', default: 'echo' },
        args: { type: 'string' },
    },
});
const [sdk, grant, url] = positionals;
const usage = (why) => {
    console.error(`oauth-client.mjs: ${why}`);
    console.error('usage: node oauth-client.mjs <v1|v2> <client_credentials|authorization_code> <mcp-url> [--client-id ID] [--client-secret SECRET] [--issuer URL] [--scope SCOPES] [--era legacy|modern] [--tool NAME] [--args JSON]');
    process.exit(2);
};
if (!['v1', 'v2'].includes(sdk)) usage(`unknown SDK ${sdk}`);
if (!['client_credentials', 'authorization_code'].includes(grant)) usage(`unknown grant ${grant}`);
if (!URL.canParse(url ?? '')) usage(`not a URL: ${url}`);
const era = opts.era ?? (sdk === 'v1' ? 'legacy' : 'modern');
if (!['legacy', 'modern'].includes(era) || (sdk === 'v1' && era !== 'legacy')) usage(`${sdk} has no era ${era}`);
if (grant === 'client_credentials' && !(opts['client-id'] && opts['client-secret'])) usage('client_credentials needs --client-id and --client-secret');
let toolArgs;
try {
    toolArgs = opts.args === undefined ? { text: `hello from ${sdk} ${grant}` } : JSON.parse(opts.args);
} catch (err) {
    usage(`--args is not JSON: ${err.message}`);
}

const MODERN = '2026-07-28';
const LEGACY = '2025-11-25';

async function loadSdk() {
    if (sdk === 'v1') {
        const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
        const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
        const { UnauthorizedError } = await import('@modelcontextprotocol/sdk/client/auth.js');
        const { ClientCredentialsProvider } = await import('@modelcontextprotocol/sdk/client/auth-extensions.js');
        return {
            Client, StreamableHTTPClientTransport, UnauthorizedError, ClientCredentialsProvider, options: {},
            callTool: (c, params) => c.callTool(params),
            // v1 takes the code alone and does no RFC 9207 check.
            finishAuth: (t, back) => t.finishAuth(back.searchParams.get('code')),
        };
    }
    const m = await import('@modelcontextprotocol/client');
    return {
        ...m,
        // As in http-client.mjs: pinned, so the client fails rather than
        // fall back to 2025 if the server does not offer 2026-07-28.
        options: era === 'modern' ? { versionNegotiation: { mode: { pin: MODERN } } } : {},
        callTool: (c, params) => c.callTool(params),
        // v2 takes the whole callback, so it checks iss (RFC 9207) itself.
        finishAuth: (t, back) => t.finishAuth(back.searchParams),
    };
}

const failures = [];
const expect = (ok, what) => { if (!ok) failures.push(what); };
const summary = { sdk, era, grant, url, failures, http: [], authorizations: 0 };

// Every exchange, MCP and OAuth, through one recording fetch.
const recordingFetch = async (input, init = {}) => {
    const u = new URL(input instanceof Request ? input.url : String(input));
    const rec = { method: init.method ?? (input instanceof Request ? input.method : 'GET'), url: u.origin + u.pathname };
    summary.http.push(rec);
    try {
        const res = await fetch(input, init);
        rec.status = res.status;
        if (res.status === 401 || res.status === 403) rec.wwwAuthenticate = res.headers.get('www-authenticate');
        return res;
    } catch (err) {
        rec.fetchError = String(err);
        throw err;
    }
};

// playBrowser fetches an authorization URL and follows the authorization
// server's redirects, as a browser would with its cookies, and returns the
// first redirect that leaves the server: the client's redirect URI.
async function playBrowser(authorizationUrl) {
    const jar = new Map();
    let at = new URL(authorizationUrl);
    const origin = at.origin;
    for (let hop = 0; hop < 10; hop++) {
        const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
        const res = await fetch(at, { redirect: 'manual', headers: cookie ? { cookie } : {} });
        // Paths are ignored: only this one server's cookies are kept, and
        // the newest of a name is the one its next page wants.
        for (const c of res.headers.getSetCookie()) {
            const [pair] = c.split(';');
            const eq = pair.indexOf('=');
            jar.set(pair.slice(0, eq).trim(), pair.slice(eq + 1).trim());
        }
        const location = res.headers.get('location');
        if (res.status < 300 || res.status > 399 || !location) {
            throw new Error(`GET ${at.origin}${at.pathname}: ${res.status}, not a redirect: ${(await res.text()).slice(0, 500)}`);
        }
        const next = new URL(location, at);
        if (next.origin !== origin) return next;
        at = next;
    }
    throw new Error(`authorization at ${origin} did not leave the server within 10 redirects`);
}

// A provider for authorization code with PKCE, storing everything in
// memory, as a CLI would for one run.
class HeadlessProvider {
    constructor(clientId, issuer) {
        this._redirect = `http://127.0.0.1:${40000 + Math.floor(Math.random() * 20000)}/callback`;
        // A pre-registered client is bound to its authorization server
        // (SEP-2352) when --issuer names it.
        this._client = clientId ? { client_id: clientId, ...(issuer ? { issuer } : {}) } : undefined;
        this._state = crypto.randomUUID();
        this.back = undefined;
    }
    get redirectUrl() { return this._redirect; }
    get clientMetadata() {
        return {
            client_name: `mcprel interop ${sdk}`,
            redirect_uris: [this._redirect],
            grant_types: ['authorization_code', 'refresh_token'],
            response_types: ['code'],
            token_endpoint_auth_method: 'none',
        };
    }
    state() { return this._state; }
    clientInformation() { return this._client; }
    saveClientInformation(info) {
        // Also called to stamp a pre-registered client with its issuer.
        if (info.client_id !== this._client?.client_id) summary.registeredClientId = info.client_id;
        this._client = info;
    }
    tokens() { return this._tokens; }
    saveTokens(tokens) { this._tokens = tokens; }
    saveCodeVerifier(v) { this._verifier = v; }
    codeVerifier() { return this._verifier; }
    // v2 keeps what it discovered across the redirect, to check that the
    // code goes back to the authorization server it came from.
    saveDiscoveryState(state) { this._discovery = state; }
    discoveryState() { return this._discovery; }
    async redirectToAuthorization(authorizationUrl) {
        summary.authorizations++;
        const u = new URL(authorizationUrl);
        summary.authorizationRequest = Object.fromEntries(['client_id', 'scope', 'resource', 'code_challenge_method', 'redirect_uri'].map((k) => [k, u.searchParams.get(k)]));
        this.back = await playBrowser(authorizationUrl);
    }
}

function claimsOf(token) {
    try {
        const payload = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
        return Object.fromEntries(['iss', 'aud', 'sub', 'scope', 'client_id', 'exp', 'iat'].filter((k) => k in payload).map((k) => [k, payload[k]]));
    } catch {
        return { opaque: true };
    }
}

const S = await loadSdk();
let provider;
if (grant === 'client_credentials') {
    const o = { clientId: opts['client-id'], clientSecret: opts['client-secret'] };
    if (opts.issuer) o.expectedIssuer = opts.issuer;
    if (opts.scope) o.scope = opts.scope;
    provider = new S.ClientCredentialsProvider(o);
} else {
    provider = new HeadlessProvider(opts['client-id'], opts.issuer);
}

const connect = async () => {
    const transport = new S.StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: recordingFetch });
    const client = new S.Client({ name: 'mcprel-interop-oauth', version: '0.0.0' }, S.options);
    await client.connect(transport);
    return { client, transport };
};

let exitCode = 0;
let session;
try {
    try {
        session = await connect();
    } catch (err) {
        // Authorization code: the SDK sent the user agent off and gave up
        // this connection; finish with the code and connect again.
        if (!(err instanceof S.UnauthorizedError) || grant !== 'authorization_code' || !provider.back) throw err;
        const back = provider.back;
        summary.callback = back.origin + back.pathname;
        if (back.searchParams.get('error')) throw new Error(`authorization refused: ${back.searchParams.get('error')}: ${back.searchParams.get('error_description')}`);
        expect(back.searchParams.get('state') === provider.state(), `callback state ${back.searchParams.get('state')}, want ${provider.state()}`);
        expect(back.origin + back.pathname === provider.redirectUrl, `authorization ended at ${back}`);
        summary.callbackIss = back.searchParams.get('iss');
        const t = new S.StreamableHTTPClientTransport(new URL(url), { authProvider: provider, fetch: recordingFetch });
        await S.finishAuth(t, back);
        session = await connect();
    }
    const { client, transport } = session;
    summary.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null;
    summary.sessionId = transport.sessionId ?? null;
    expect(summary.protocolVersion === (era === 'legacy' ? LEGACY : MODERN), `negotiated ${summary.protocolVersion}`);

    const tokens = await provider.tokens();
    expect(typeof tokens?.access_token === 'string', 'no access token after connecting');
    summary.token = claimsOf(tokens.access_token);
    summary.grantedScope = tokens.scope ?? null;

    const { tools } = await client.listTools();
    summary.tools = tools.map((t) => t.name);
    expect(summary.tools.includes(opts.tool), `tools/list lacks ${opts.tool}`);
    const res = await S.callTool(client, { name: opts.tool, arguments: toolArgs });
    summary.call = { tool: opts.tool, isError: res.isError ?? false, content: res.content, structuredContent: res.structuredContent };
    expect(!res.isError, `${opts.tool} returned an error: ${JSON.stringify(res.content)}`);
    if (opts.tool === 'echo' && opts.args === undefined) {
        expect(res.content?.[0]?.text === toolArgs.text, `echo returned ${JSON.stringify(res.content)}`);
    }
    // The first MCP request went without a token and met the challenge.
    const firstMcp = summary.http.find((r) => r.url === new URL(url).origin + new URL(url).pathname);
    summary.firstChallenge = firstMcp?.status === 401 ? firstMcp.wwwAuthenticate : null;
    expect(firstMcp?.status === 401, `the first MCP request got ${firstMcp?.status}, not 401`);
    await client.close();
} catch (err) {
    summary.error = String(err?.stack ?? err);
    exitCode = 1;
}
if (failures.length) exitCode = 1;
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(exitCode);
