// A real OAuth 2.1 / OpenID authorization server for mcprel's
// resource-server tests: panva's oidc-provider, configured the way an MCP
// deployment would be, with every human step approved automatically.
//
// usage: node provider.mjs [--port N] [--ttl SECONDS] [--alg RS256|ES256]
//                          [--format jwt|opaque] [--account NAME]
//                          [--client-id ID] [--client-secret SECRET]
//                          [--native-client-id ID]
//                          [--rs-client-id ID] [--rs-client-secret SECRET]
//                          [--backdate SECONDS]
//
// Every flag also reads from the environment (OAUTH_PORT, OAUTH_TTL,
// OAUTH_ALG, OAUTH_FORMAT, OAUTH_ACCOUNT, OAUTH_CLIENT_ID,
// OAUTH_CLIENT_SECRET, OAUTH_NATIVE_CLIENT_ID, OAUTH_RS_CLIENT_ID,
// OAUTH_RS_CLIENT_SECRET, OAUTH_BACKDATE); the flag wins.
//
// It listens on 127.0.0.1 (port 0, any free port, unless --port says
// otherwise) and prints its issuer URL, e.g. http://127.0.0.1:43123, as the
// first line on stdout once it accepts requests; it then logs one line per
// HTTP exchange on stderr. It stops on SIGTERM, SIGINT, or EOF on
// stdin when stdin is a pipe.
//
// What it serves:
//   - OpenID discovery and RFC 8414 metadata, JWKS (an RS256 and an ES256
//     key, generated at start), authorization, token, registration (RFC
//     7591, open), introspection (RFC 7662) and revocation endpoints.
//   - Resource indicators (RFC 8707): a `resource` that is any http URL on
//     127.0.0.1 or localhost gets access tokens whose `aud` is exactly that
//     URL, whose `scope` is the granted subset of mcp:tools mcp:read
//     mcp:write, signed with --alg, in RFC 9068 JWT form (or opaque with
//     --format opaque, the form introspection accepts; oidc-provider
//     refuses to introspect JWTs). There is no default resource: without
//     one, an access token is opaque and has no audience.
//   - A confidential client (--client-id/--client-secret, default
//     mcprel-cc / mcprel-cc-secret) for client_credentials, authenticating
//     with client_secret_basic.
//   - A public native client (--native-client-id, default mcprel-native)
//     for authorization code + PKCE S256 with loopback redirect URIs
//     http://127.0.0.1/callback and http://localhost/callback on any port
//     (RFC 8252 §7.3), refresh tokens on offline_access.
//   - A confidential client for a resource server to introspect with
//     (--rs-client-id/--rs-client-secret, default mcprel-rs /
//     mcprel-rs-secret).
//   - With --backdate N (N > 0), a second confidential client,
//     <client-id>-backdated with the same secret, for client_credentials,
//     whose JWT access tokens have iat and exp N seconds earlier than
//     issued: with N past the TTL, a token that expired before anyone
//     saw it. oidc-provider refuses a TTL of zero or less, and sets exp
//     from the time of issue; its JWT customizer (formats.customizers.jwt)
//     may change the claims before it signs them, which is how. Opaque
//     tokens are not backdated.
//   - Interactions that need nobody: login finishes as --account (default
//     alice) and consent grants every scope, claim and resource asked for.
//     A headless client follows the redirects (keeping the cookies the
//     provider sets) until one points at its redirect URI.
//
// oidc-provider 9 prints "Unsupported runtime" on Node 20 (it is tested on
// 22 LTS and later); it runs on 20.19 and later all the same.

import { randomBytes, generateKeyPairSync } from 'node:crypto';
import { fstatSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const { values: opts } = parseArgs({
    options: {
        port: { type: 'string', default: process.env.OAUTH_PORT ?? '0' },
        ttl: { type: 'string', default: process.env.OAUTH_TTL ?? '600' },
        alg: { type: 'string', default: process.env.OAUTH_ALG ?? 'RS256' },
        format: { type: 'string', default: process.env.OAUTH_FORMAT ?? 'jwt' },
        account: { type: 'string', default: process.env.OAUTH_ACCOUNT ?? 'alice' },
        'client-id': { type: 'string', default: process.env.OAUTH_CLIENT_ID ?? 'mcprel-cc' },
        'client-secret': { type: 'string', default: process.env.OAUTH_CLIENT_SECRET ?? 'mcprel-cc-secret' },
        'native-client-id': { type: 'string', default: process.env.OAUTH_NATIVE_CLIENT_ID ?? 'mcprel-native' },
        'rs-client-id': { type: 'string', default: process.env.OAUTH_RS_CLIENT_ID ?? 'mcprel-rs' },
        'rs-client-secret': { type: 'string', default: process.env.OAUTH_RS_CLIENT_SECRET ?? 'mcprel-rs-secret' },
        backdate: { type: 'string', default: process.env.OAUTH_BACKDATE ?? '0' },
    },
    strict: true,
});
const usage = (why) => {
    console.error(`provider.mjs: ${why}`);
    process.exit(2);
};
const port = Number(opts.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) usage(`bad --port ${opts.port}`);
const ttl = Number(opts.ttl);
if (!Number.isInteger(ttl) || ttl < 1) usage(`bad --ttl ${opts.ttl}`);
if (!['RS256', 'ES256'].includes(opts.alg)) usage(`bad --alg ${opts.alg}`);
if (!['jwt', 'opaque'].includes(opts.format)) usage(`bad --format ${opts.format}`);
const backdate = Number(opts.backdate);
if (!Number.isInteger(backdate) || backdate < 0) usage(`bad --backdate ${opts.backdate}`);
const backdatedClientId = `${opts['client-id']}-backdated`;

const RESOURCE_SCOPES = 'mcp:tools mcp:read mcp:write';

// Signing keys, new on every start. The first key of an algorithm signs.
const jwk = (type, options, alg) => ({
    ...generateKeyPairSync(type, options).privateKey.export({ format: 'jwk' }),
    alg,
    use: 'sig',
    kid: `${alg.toLowerCase()}-${randomBytes(6).toString('hex')}`,
});
const keys = [
    jwk('rsa', { modulusLength: 2048 }, 'RS256'),
    jwk('ec', { namedCurve: 'P-256' }, 'ES256'),
];

// A resource indicator this server issues tokens for: an http URL on a
// loopback host, any port and path.
function isLoopbackResource(indicator) {
    const u = URL.parse(indicator);
    return u !== null && u.protocol === 'http:' && ['127.0.0.1', 'localhost'].includes(u.hostname) && u.hash === '';
}

const http = createServer();
await new Promise((resolve, reject) => {
    http.once('error', reject);
    http.listen(port, '127.0.0.1', resolve);
});
const issuer = `http://127.0.0.1:${http.address().port}`;

const provider = new Provider(issuer, {
    clients: [
        {
            client_id: opts['client-id'],
            client_secret: opts['client-secret'],
            grant_types: ['client_credentials'],
            response_types: [],
            redirect_uris: [],
            token_endpoint_auth_method: 'client_secret_basic',
        },
        {
            client_id: opts['native-client-id'],
            application_type: 'native',
            token_endpoint_auth_method: 'none',
            grant_types: ['authorization_code', 'refresh_token'],
            response_types: ['code'],
            redirect_uris: ['http://127.0.0.1/callback', 'http://localhost/callback'],
        },
        ...(backdate > 0 ? [{
            client_id: backdatedClientId,
            client_secret: opts['client-secret'],
            grant_types: ['client_credentials'],
            response_types: [],
            redirect_uris: [],
            token_endpoint_auth_method: 'client_secret_basic',
        }] : []),
        {
            client_id: opts['rs-client-id'],
            client_secret: opts['rs-client-secret'],
            grant_types: [],
            response_types: [],
            redirect_uris: [],
        },
    ],
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    jwks: { keys },
    scopes: ['openid', 'offline_access', ...RESOURCE_SCOPES.split(' ')],
    claims: { openid: ['sub'] },
    findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
    pkce: { required: () => true },
    ttl: {
        AccessToken: ttl,
        ClientCredentials: ttl,
        AuthorizationCode: 60,
        Grant: 3600,
        Interaction: 600,
        Session: 3600,
        RefreshToken: 3600,
        IdToken: 3600,
    },
    formats: {
        customizers: {
            jwt: (_ctx, token, jwt) => {
                if (backdate > 0 && token.clientId === backdatedClientId) {
                    jwt.payload.iat -= backdate;
                    jwt.payload.exp -= backdate;
                }
            },
        },
    },
    features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        introspection: { enabled: true },
        revocation: { enabled: true },
        registration: { enabled: true },
        resourceIndicators: {
            enabled: true,
            defaultResource: () => undefined,
            useGrantedResource: () => true,
            getResourceServerInfo: (_ctx, indicator) => {
                if (!isLoopbackResource(indicator)) {
                    throw new errors.InvalidTarget(`this server issues tokens only for http loopback resources, not ${indicator}`);
                }
                return {
                    scope: RESOURCE_SCOPES,
                    audience: indicator,
                    accessTokenTTL: ttl,
                    accessTokenFormat: opts.format,
                    ...(opts.format === 'jwt' ? { jwt: { sign: { alg: opts.alg } } } : {}),
                };
            },
        },
    },
    // Keep an offline_access grant's tokens alive past the (headless)
    // session; the default ends them with it.
    expiresWithSession: (_ctx, token) => !token.scopes.has('offline_access'),
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    renderError: (ctx, out) => {
        ctx.type = 'application/json';
        ctx.body = out;
    },
});
// Errors a client caused are the tests' business, not the provider's; the
// per-exchange log below shows them.
provider.on('server_error', (_ctx, err) => console.error(`server_error: ${err?.stack ?? err}`));

// interact finishes the interaction at /interaction/<uid> with no one
// there: login as the fixed account, then consent to everything requested.
async function interact(req, res) {
    const details = await provider.interactionDetails(req, res);
    const { prompt, params, session, grantId } = details;
    let result;
    if (prompt.name === 'login') {
        result = { login: { accountId: opts.account } };
    } else if (prompt.name === 'consent') {
        const grant = grantId
            ? await provider.Grant.find(grantId)
            : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
        const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
        if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
        if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
        for (const [indicator, scopes] of Object.entries(missingResourceScopes ?? {})) {
            grant.addResourceScope(indicator, scopes.join(' '));
        }
        result = { consent: { grantId: await grant.save() } };
    } else {
        result = { error: 'access_denied', error_description: `no automatic answer to prompt ${prompt.name}` };
    }
    await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
http.on('request', (req, res) => {
    res.on('finish', () => {
        const location = res.getHeader('location');
        console.error(`${req.method} ${req.url} ${res.statusCode}${location ? ` -> ${location}` : ''}`);
    });
    if (req.url.startsWith('/interaction/')) {
        interact(req, res).catch((err) => {
            console.error(`interaction: ${err?.stack ?? err}`);
            if (!res.headersSent) {
                res.writeHead(400, { 'content-type': 'application/json' });
                res.end(JSON.stringify({ error: err?.error ?? 'interaction_failed', error_description: String(err?.message ?? err) }));
            }
        });
        return;
    }
    callback(req, res);
});

// Nothing here is worth keeping: stop at once, whatever is in flight.
const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// Stdin as a pipe is its parent's lifeline: when the parent dies, so does
// the provider. Any other stdin (a terminal, /dev/null) is left alone.
if (fstatSync(0).isFIFO()) {
    process.stdin.on('end', stop);
    process.stdin.resume();
}

process.stdout.write(`${issuer}\n`);
