// An MCP server built with the official TypeScript SDK v1
// (@modelcontextprotocol/sdk) and guarded by the SDK's own resource-server
// middleware, for mcprel's client to sign in to: express, with
// requireBearerAuth in front of a stateful Streamable HTTP endpoint
// (2025-11-25) and mcpAuthMetadataRouter serving its protected resource
// metadata. Its token verifier takes only RFC 9068 JWTs the authorization
// server signed (its JWKS found through its RFC 8414 metadata) for exactly
// the server's URL; requireBearerAuth then wants the scope and checks the
// resource again. One tool, echo.
//
// usage: node auth-server.mjs --issuer URL --token-log FILE [--scope S]
//
// It listens on 127.0.0.1 (a free port) and prints its URL,
// http://127.0.0.1:PORT/mcp, as the first line on stdout once it accepts
// requests. Every token the verifier is shown is appended to --token-log,
// one JSON line each with what the verifier made of it (accepted, iss,
// aud, sub, scope, client_id), so that a test can tell what reached the
// server. It stops on SIGTERM, SIGINT, or EOF on stdin when stdin is a
// pipe.

import { randomUUID } from 'node:crypto';
import { appendFileSync, fstatSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import express from 'express';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { mcpAuthMetadataRouter, getOAuthProtectedResourceMetadataUrl } from '@modelcontextprotocol/sdk/server/auth/router.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { CallToolRequestSchema, ListToolsRequestSchema, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const { values: opts } = parseArgs({
    options: {
        issuer: { type: 'string' },
        scope: { type: 'string', default: 'mcp:tools' },
        'token-log': { type: 'string' },
    },
    strict: true,
});
if (!opts.issuer || !opts['token-log']) {
    console.error('usage: node auth-server.mjs --issuer URL --token-log FILE [--scope S]');
    process.exit(2);
}

const metadataResponse = await fetch(`${opts.issuer}/.well-known/oauth-authorization-server`);
if (!metadataResponse.ok) throw new Error(`authorization server metadata: HTTP ${metadataResponse.status}`);
const oauthMetadata = await metadataResponse.json();
if (oauthMetadata.issuer !== opts.issuer) throw new Error(`metadata issuer ${oauthMetadata.issuer} is not ${opts.issuer}`);
const jwks = createRemoteJWKSet(new URL(oauthMetadata.jwks_uri));

const http = createServer();
await new Promise((resolve, reject) => {
    http.once('error', reject);
    http.listen(0, '127.0.0.1', resolve);
});
const endpoint = new URL(`http://127.0.0.1:${http.address().port}/mcp`);

function record(token, payload, error) {
    const line = { token, accepted: !error };
    if (error) line.error = String(error.message ?? error);
    if (payload) Object.assign(line, { iss: payload.iss, aud: payload.aud, sub: payload.sub, scope: payload.scope, client_id: payload.client_id });
    appendFileSync(opts['token-log'], `${JSON.stringify(line)}\n`);
}

const verifier = {
    async verifyAccessToken(token) {
        let payload;
        try {
            ({ payload } = await jwtVerify(token, jwks, {
                issuer: opts.issuer,
                audience: endpoint.href,
                typ: 'at+jwt',
                algorithms: ['RS256', 'ES256'],
            }));
        } catch (err) {
            record(token, undefined, err);
            throw new InvalidTokenError(`the token was refused: ${err.code ?? err.message}`);
        }
        record(token, payload);
        return {
            token,
            clientId: payload.client_id,
            scopes: typeof payload.scope === 'string' ? payload.scope.split(' ') : [],
            expiresAt: payload.exp,
            resource: new URL([payload.aud].flat()[0]),
            extra: { sub: payload.sub },
        };
    },
};

function mcpServer() {
    const server = new Server({ name: 'ts-auth-server', version: '1.0.0' }, { capabilities: { tools: {} } });
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
        tools: [{ name: 'echo', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } }],
    }));
    server.setRequestHandler(CallToolRequestSchema, async (req) => {
        if (req.params.name !== 'echo') throw new Error(`unknown tool ${req.params.name}`);
        return { content: [{ type: 'text', text: String(req.params.arguments?.text ?? '') }] };
    });
    return server;
}

const app = express();
app.use(express.json());
app.use(mcpAuthMetadataRouter({ oauthMetadata, resourceServerUrl: endpoint, scopesSupported: [opts.scope], resourceName: 'ts-auth-server' }));
const bearer = requireBearerAuth({
    verifier,
    requiredScopes: [opts.scope],
    resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(endpoint),
    expectedResource: endpoint,
});

// The SDK's stateful Streamable HTTP: a transport per session, found by
// its Mcp-Session-Id; an initialize without one starts a session.
const transports = new Map();
app.all('/mcp', bearer, async (req, res) => {
    const id = req.headers['mcp-session-id'];
    let transport = id ? transports.get(id) : undefined;
    if (!transport) {
        if (id || req.method !== 'POST' || !isInitializeRequest(req.body)) {
            res.status(id ? 404 : 400).json({ jsonrpc: '2.0', error: { code: -32000, message: id ? 'no such session' : 'no session' }, id: null });
            return;
        }
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (sid) => transports.set(sid, transport),
        });
        transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
        await mcpServer().connect(transport);
    }
    await transport.handleRequest(req, res, req.body);
});
http.on('request', app);

const stop = () => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
if (fstatSync(0).isFIFO()) {
    process.stdin.on('end', stop);
    process.stdin.resume();
}
process.stdout.write(`${endpoint.href}\n`);
