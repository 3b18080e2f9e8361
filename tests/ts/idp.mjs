// A real OpenID provider (oidc-provider, certified) for tests/e2e/test_oauth_idp.py: it issues
// access tokens for one resource (RFC 8707 resource indicators) by the client credentials grant,
// as JWTs signed with its own key (published at its jwks_uri) or as opaque tokens (introspection).
//
//   node idp.mjs <port> <jwt|opaque> <access token TTL in seconds> [key file]
//
// With a key file, it signs with the key there (writing a new one first if there is none): two
// providers sharing one, as the tenants of a multi-tenant provider share their signing keys.
//
// Prints "ready <issuer>" once it listens; ends when its standard input closes.
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const [port, format, ttl, keyFile] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
function newKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}
let jwk;
if (keyFile && existsSync(keyFile)) {
  jwk = JSON.parse(readFileSync(keyFile, 'utf8'));
} else {
  jwk = newKey();
  if (keyFile) writeFileSync(keyFile, JSON.stringify(jwk));
}

const provider = new Provider(issuer, {
  jwks: { keys: [jwk] },
  clients: [
    // an agent: asks for tokens for a resource (hitl-mcp's /mcp, or another)
    { client_id: 'agent', client_secret: 'agent-secret-0123456789', grant_types: ['client_credentials'],
      redirect_uris: [], response_types: [], scope: 'hitl:ask other' },
    { client_id: 'narrow', client_secret: 'narrow-secret-0123456789', grant_types: ['client_credentials'],
      redirect_uris: [], response_types: [], scope: 'other' },
    // hitl-mcp itself, for introspection
    { client_id: 'hitl', client_secret: 'hitl-secret-0123456789', grant_types: [],
      redirect_uris: [], response_types: [] },
  ],
  scopes: ['hitl:ask', 'other'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      getResourceServerInfo: async (ctx, resource) => ({
        scope: 'hitl:ask other',
        audience: resource,
        accessTokenTTL: Number(ttl),
        accessTokenFormat: format,
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
});
provider.proxy = false;
const server = provider.listen(Number(port), '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
process.stdin.on('end', () => server.close(() => process.exit(0)));
process.stdin.resume();
