// The TypeScript SDK's OAuth client (what claude.ai's and most hosts' connectors build on) against
// hitl-mcp's built-in authorization server. Run by tests/e2e/test_oauth_ts.py as `node oauth.mjs`:
//
// 1. connects to HITL_MCP_URL with no token: the 401 leads the SDK to the resource metadata, the
//    authorization server's metadata, registration (DCR) and the authorization URL, which it prints
//    as {"authorize": url}; the test opens it in Chromium, where the operator signs in and allows;
// 2. reads the code the redirect brought (one line on standard input) and finishes (PKCE);
// 3. calls notify_user; then, holding a stale access token, calls again: the SDK refreshes;
// 4. prints {"result", "refreshed", "access_token", "refresh_token", "client_id"}.
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const url = new URL(process.env.HITL_MCP_URL);
const callback = process.env.HITL_CALLBACK;
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

class Provider {
  get redirectUrl() { return callback; }
  get clientMetadata() {
    return {
      client_name: "TS SDK test client",
      redirect_uris: [callback],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() { return this.client; }
  saveClientInformation(info) { this.client = info; }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; }
  redirectToAuthorization(authorizationUrl) {
    process.stdout.write(JSON.stringify({ authorize: authorizationUrl.toString() }) + "\n");
  }
  saveCodeVerifier(verifier) { this.verifier = verifier; }
  codeVerifier() { return this.verifier; }
}

const provider = new Provider();
const first = new StreamableHTTPClientTransport(url, { authProvider: provider });
try {
  await new Client({ name: "ts-oauth", version: "1.0.0" }).connect(first);
  throw new Error("connected without authorization");
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
}
const { value: code } = await lines.next();
await first.finishAuth(code.trim());

const client = new Client({ name: "ts-oauth", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
const result = await client.callTool({ name: "notify_user", arguments: { message: "from the TS SDK" } });
const before = provider.saved;
provider.saved = { ...before, access_token: "hitl_at_stale" }; // refused: the SDK refreshes
await client.callTool({ name: "notify_user", arguments: { message: "after a refresh" } });
await client.close();
process.stdout.write(JSON.stringify({
  result: result.structuredContent ?? null,
  refreshed: provider.saved.refresh_token !== before.refresh_token,
  access_token: provider.saved.access_token,
  refresh_token: provider.saved.refresh_token,
  client_id: provider.client.client_id,
}) + "\n");
process.exit(0);
