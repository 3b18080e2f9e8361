"""DNS rebinding: on any loopback bind, a request naming a foreign Host or Origin reaches nothing.

Real ``hitl-mcp serve`` subprocesses on loopback addresses the MCP SDK's own check does not know
(127.0.0.2, and ::1 spelled long), with MCP over streamable HTTP, the API and the inbox.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from hitl_mcp.web.rebinding import Allowed
from tests.conftest import TOKEN, free_port, serve_args, server_env, server_process, write_config

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "rebinding-page", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize("bind", ["127.0.0.2", "0:0:0:0:0:0:0:1"])
async def test_foreign_host_or_origin_reaches_no_route(tmp_path: Path, state_dir: Path, bind: str) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    base = f"http://[{bind}]:{port}" if ":" in bind else f"http://{bind}:{port}"
    args = serve_args(config, "--transport", "http", "--host", bind)
    async with server_process(args, server_env(state_dir)), httpx2.AsyncClient(base_url=base) as http:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        foreign_hosts = [
            f"evil.example:{port}",
            "evil.example",
            f"localhost:{port + 1}",
            "127.0.0.1.evil.example",
        ]
        for host in foreign_hosts:
            foreign = {"Host": host}
            r = await http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **foreign})
            assert r.status_code == 421, (host, r.status_code, r.text)
            assert "DNS rebinding" in r.json()["error"]
            assert (await http.get("/api/requests", headers={**bearer, **foreign})).status_code == 421
            assert (await http.get("/", headers={**bearer, **foreign})).status_code == 421
            assert (await http.get("/login", params={"token": TOKEN}, headers=foreign)).status_code == 421
        # a page on another site, with our own Host (a plain cross-site request): its Origin is refused
        evil = {"Origin": "http://evil.example"}
        r = await http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **evil})
        assert r.status_code == 403 and "other sites" in r.json()["error"]
        assert (await http.get("/api/requests", headers={**bearer, **evil})).status_code == 403
        # our own names pass: the bound address (in any spelling), localhost, our own origin
        ours = [None, f"localhost:{port}"] + ([f"[::1]:{port}"] if ":" in bind else [])
        for host in ours:
            named = {"Host": host} if host else {}
            r = await http.post(
                "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **named, **bearer, "Origin": base}
            )
            assert r.status_code == 200, (host, r.text)
            assert (await http.get("/api/requests", headers={**bearer, **named})).status_code == 200
        assert (await http.get("/", headers={"Origin": "null"})).status_code == 401  # past the check: sign in
        assert (await http.get("/healthz", headers={"Host": "evil.example"})).status_code == 200


def test_allowed_names() -> None:
    allowed = Allowed.for_bind("127.0.1.1", 8765, "https://hitl.example.com")
    assert allowed.host_ok("127.0.1.1:8765") and allowed.host_ok("LOCALHOST:8765")
    assert allowed.host_ok("hitl.example.com") and allowed.host_ok("hitl.example.com:443")
    bad_hosts = [
        "127.0.1.1:8766",
        "127.0.1.1",
        "localhost",
        "evil.com",
        "",
        None,
        "a@127.0.1.1:8765",
        "[::1]:8765",
    ]
    for bad in bad_hosts:
        assert not allowed.host_ok(bad), bad
    assert allowed.origin_ok(None) and allowed.origin_ok("null")
    assert allowed.origin_ok("http://127.0.1.1:8765") and allowed.origin_ok("https://hitl.example.com")
    for bad in ("http://evil.com", "https://127.0.1.1:8765", "http://hitl.example.com", "file://", "x"):
        assert not allowed.origin_ok(bad), bad
    v6 = Allowed.for_bind("0:0:0:0:0:0:0:1", 80)
    assert v6.host_ok("[::1]") and v6.host_ok("[0::1]:80") and v6.origin_ok("http://[::1]")
