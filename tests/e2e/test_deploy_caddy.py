"""Public HTTPS, as docs/remote.md sets it up: Caddy (Debian's) terminates TLS with a certificate from
a local CA (trustme) and forwards with ``deploy/caddy/hitl.caddy``, the snippet ``deploy/Caddyfile``
imports; hitl-mcp, on loopback, has ``server.public_url`` set to the https address. A client that
trusts only that CA finds the OAuth metadata from a 401 with https URLs throughout, registers, gets
consent, exchanges the code and calls a tool, all through the proxy."""

from __future__ import annotations

import contextlib
import os
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from tests.conftest import ROOT, bearer, free_port
from tests.support.mail import Certs
from tests.support.oauth import grant, serve_oauth

pytestmark = pytest.mark.anyio

SNIPPET = ROOT / "deploy" / "caddy" / "hitl.caddy"


@pytest.fixture(autouse=True)
def caddy_installed() -> None:
    if shutil.which("caddy") is None:
        message = "the reverse proxy test needs caddy (apt-get install caddy)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must install it")
        pytest.skip(message)


@contextlib.asynccontextmanager
async def caddy(tmp_path: Path, certs: Certs, port: int, upstream: str) -> AsyncIterator[None]:
    key = tmp_path / "server.key"
    cert = tmp_path / "server.crt"
    ca = certs.ca
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    config = tmp_path / "Caddyfile"
    config.write_text(
        "{\n\tadmin off\n\tauto_https off\n\tstorage file_system " + str(tmp_path / "caddy-data") + "\n}\n"
        f"https://127.0.0.1:{port} {{\n\ttls {cert} {key}\n\timport {SNIPPET}\n}}\n"
    )
    env = {**os.environ, "HITL_UPSTREAM": upstream, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    async with await anyio.open_process(
        ["caddy", "run", "--config", str(config), "--adapter", "caddyfile"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):  # Caddy says when it serves
            async for chunk in process.stderr:
                seen += chunk
                if b"serving initial configuration" in seen:
                    break
        try:
            yield
        finally:
            process.terminate()
            with anyio.move_on_after(5):
                await process.wait()


async def test_oauth_through_caddy_over_https_with_a_local_ca(
    state_dir: Path, tmp_path: Path, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca_file))  # the MCP client trusts only the test CA
    port = free_port()
    public = f"https://127.0.0.1:{port}"
    async with serve_oauth(state_dir, url=public) as served:
        upstream = served.url.removeprefix("http://")
        async with caddy(tmp_path, certs, port, upstream):
            context = ssl.create_default_context(cafile=str(certs.ca_file))
            async with httpx2.AsyncClient(verify=context) as http:
                r = await http.post(f"{public}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                assert r.status_code == 401
                metadata_url = f"{public}/.well-known/oauth-protected-resource/mcp"
                assert f'resource_metadata="{metadata_url}"' in r.headers["www-authenticate"]
                resource = (await http.get(metadata_url)).json()
                assert resource["resource"] == f"{public}/mcp"
                assert resource["authorization_servers"] == [public]
                issuer = (await http.get(f"{public}/.well-known/oauth-authorization-server")).json()
                assert issuer["issuer"] == public
                assert issuer["token_endpoint"] == f"{public}/token"
                issued = await grant(http, public)
            async with Client(bearer(f"{public}/mcp", issued["access_token"])) as client:
                result = await client.call_tool("notify_user", {"message": "over https"})
                assert not result.is_error
