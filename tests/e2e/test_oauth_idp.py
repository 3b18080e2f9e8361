"""An external identity provider (``server.oauth.issuer: <its URL>``): a real one, ``oidc-provider``
(a certified OpenID provider, in ``tests/ts``, started by these tests as ``node idp.mjs``), issues
access tokens for a resource (RFC 8707) by the client credentials grant, as JWTs signed with its own
key or as opaque tokens. hitl-mcp checks the JWTs against the provider's JWKS (found in its metadata)
and asks about the opaque ones at its introspection endpoint; and refuses an expired token, one for
another audience, one from another issuer, a forged one and one without ``hitl:ask``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from hitl_mcp.core.principal import of_owner
from hitl_mcp.kit.signing import b64url, unb64url
from hitl_mcp.web.oauth.external import REFETCH_AFTER
from tests.conftest import ROOT, bearer, free_port
from tests.support.oauth import Served, serve_oauth

pytestmark = pytest.mark.anyio

TS = ROOT / "tests" / "ts"
AGENT = ("agent", "agent-secret-0123456789")
NARROW = ("narrow", "narrow-secret-0123456789")
SECRET = "hitl-secret-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture(autouse=True)
def node_project() -> None:
    if shutil.which("node") is None or not (TS / "node_modules" / "oidc-provider").is_dir():
        message = "the identity provider tests need node and tests/ts/node_modules (npm ci --prefix tests/ts)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must install them")
        pytest.skip(message)


@contextlib.asynccontextmanager
async def provider(
    token_format: str = "jwt", ttl: int = 300, key: Path | None = None, port: int | None = None
) -> AsyncIterator[str]:
    """oidc-provider on a loopback port; its issuer URL. ``key``: a file with its signing key (made
    there if missing), to share it with another provider; ``port``: the same issuer again."""
    port = port or free_port()
    args = ["node", "idp.mjs", str(port), token_format, str(ttl), *([str(key)] if key else [])]
    async with await anyio.open_process(
        args, cwd=str(TS), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as process:
        assert process.stdout is not None and process.stdin is not None
        seen = b""
        with anyio.fail_after(30):
            async for chunk in process.stdout:
                seen += chunk
                if b"ready" in seen:
                    break
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await process.stdin.aclose()  # it closes its server and exits
            with anyio.move_on_after(5):
                await process.wait()


async def token_from(
    issuer: str, resource: str, client: tuple[str, str] = AGENT, scope: str = "hitl:ask"
) -> str:
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            f"{issuer}/token",
            data={"grant_type": "client_credentials", "scope": scope, "resource": resource},
            auth=client,
        )
    assert r.status_code == 200, r.text
    token: str = r.json()["access_token"]
    return token


async def status(served: Served, token: str) -> int:
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            served.mcp, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}
        )
    return r.status_code


def external(issuer: str, extra: str = "") -> str:
    return f"{{issuer: '{issuer}', leeway: 0s{extra}}}"


async def test_jwt_access_tokens_are_checked_against_the_providers_keys(
    state_dir: Path, tmp_path: Path
) -> None:
    key = tmp_path / "shared-key.json"
    async with (
        provider("jwt", key=key) as issuer,
        provider("jwt") as stranger,
        provider("jwt", key=key) as tenant,
    ):
        async with serve_oauth(state_dir, external(issuer)) as served:
            token = await token_from(issuer, served.mcp)
            async with Client(bearer(served.mcp, token)) as client:
                result = await client.call_tool("notify_user", {"message": "from the IdP"})
            assert not result.is_error
            broker = await served.runtime.broker()
            (request,) = await broker.store.list()
            principal = of_owner(request.owner)
            assert (principal.kind, principal.name) == ("oauth", f"agent|agent|agent|{issuer}")

            # refused: another audience, another issuer, a forged signature or payload, no hitl:ask
            assert await status(served, await token_from(issuer, "http://127.0.0.1:1/mcp")) == 401
            assert await status(served, await token_from(stranger, served.mcp)) == 401
            # another issuer signing with the same key (another tenant of one provider)
            assert await status(served, await token_from(tenant, served.mcp)) == 401
            header, payload, signature = token.split(".")
            claims = json.loads(unb64url(payload))
            richer = b64url(json.dumps({**claims, "sub": "root"}).encode())
            assert await status(served, f"{header}.{richer}.{signature}") == 401
            flipped = signature[:-4] + ("AAAA" if not signature.endswith("AAAA") else "BBBB")
            assert await status(served, f"{header}.{payload}.{flipped}") == 401
            unsigned = b64url(json.dumps({"alg": "none", "typ": "at+jwt"}).encode())
            assert await status(served, f"{unsigned}.{payload}.") == 401
            narrow = await token_from(issuer, served.mcp, NARROW, "other")
            assert await status(served, narrow) == 403
            assert await status(served, token) == 200  # the real one, still


async def test_the_keys_are_kept_and_a_rotation_is_followed(state_dir: Path) -> None:
    """The key set is fetched once: with the provider down, its token still checks. The provider back
    with a new key (a rotation: same issuer, a new kid): its new token has the key set fetched again
    at once, and the old key, no longer published, no longer counts."""
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    async with serve_oauth(state_dir, external(issuer)) as served:
        async with provider("jwt", port=port):
            old = await token_from(issuer, served.mcp)
            assert await status(served, old) == 200
        assert await status(served, old) == 200  # the provider is down: its keys were kept
        async with provider("jwt", port=port):
            new = await token_from(issuer, served.mcp)
            keys = served.oauth.external
            await anyio.sleep(max(0.0, keys._fetched + REFETCH_AFTER - time.monotonic()))  # the refetch limit
            assert await status(served, new) == 200
            assert await status(served, old) == 401


async def test_an_expired_jwt_is_refused(state_dir: Path) -> None:
    async with provider("jwt", ttl=4) as issuer, serve_oauth(state_dir, external(issuer)) as served:
        token = await token_from(issuer, served.mcp)
        expires = json.loads(unb64url(token.split(".")[1]))["exp"]  # 3 to 4 s from now: iat is whole seconds
        assert await status(served, token) == 200
        await anyio.sleep(max(0.0, expires - time.time()) + 1.05)  # a token's clock, not an event
        assert await status(served, token) == 401


async def test_opaque_tokens_are_introspected(state_dir: Path) -> None:
    async with provider("opaque") as issuer:
        endpoint = f"{issuer}/token/introspection"
        introspection = f", introspection: {{url: '{endpoint}', client_id: hitl, client_secret: {SECRET}}}"
        async with serve_oauth(state_dir, external(issuer, introspection)) as served:
            token = await token_from(issuer, served.mcp)
            assert token.count(".") == 0  # opaque
            async with Client(bearer(served.mcp, token)) as client:
                assert not (await client.call_tool("notify_user", {"message": "opaque"})).is_error
            assert await status(served, await token_from(issuer, "http://127.0.0.1:1/mcp")) == 401
            assert await status(served, await token_from(issuer, served.mcp, NARROW, "other")) == 403
            assert await status(served, "not-a-token-the-provider-issued") == 401
