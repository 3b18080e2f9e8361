"""``hitl-mcp oauth clients``: the apps the built-in authorization server let in, listed with their
live grants; ``revoke`` ends a client's grants and registration, and a running server refuses its
token from the next request on (the CLI writes the same store)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from tests.conftest import cli
from tests.support.oauth import config_text, grant, serve_oauth

pytestmark = pytest.mark.anyio

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
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_clients_are_listed_and_a_revoked_one_is_refused_at_once(
    state_dir: Path, tmp_path: Path
) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        config = tmp_path / "hitl.yaml"
        config.write_text(config_text(served.url))
        kept = await grant(http, served.url)
        gone = await grant(http, served.url)

        code, out, err = await cli(state_dir, "oauth", "clients", "--json", "--config", str(config))
        assert code == 0, err
        listed = {c["client_id"]: c for c in json.loads(out)}
        assert set(listed) == {kept["client_id"], gone["client_id"]}
        assert all(c["live_grants"] == 1 and c["kind"] == "registered" for c in listed.values())
        assert all(c["name"] == "test app" for c in listed.values())

        code, out, err = await cli(
            state_dir, "oauth", "clients", "revoke", gone["client_id"], "--config", str(config)
        )
        assert code == 0, err
        assert "1 grant(s) ended" in out
        for token, status in ((gone["access_token"], 401), (kept["access_token"], 200)):
            headers = {**HEADERS, "Authorization": f"Bearer {token}"}
            assert (await http.post(served.mcp, json=INITIALIZE, headers=headers)).status_code == status
        r = await http.post(
            f"{served.url}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": gone["refresh_token"],
                "client_id": gone["client_id"],
            },
        )
        assert r.status_code == 401 and r.json()["error"] == "invalid_client"  # its registration is gone too

        code, out, err = await cli(state_dir, "oauth", "clients", "--config", str(config))
        assert code == 0, err
        assert f"{gone['client_id']} (test app)  registered, revoked" in out
        assert f"{kept['client_id']} (test app)  registered, 1 live grant(s)" in out
        code, _, err = await cli(state_dir, "oauth", "clients", "revoke", "nobody", "--config", str(config))
        assert code != 0 and "no OAuth client 'nobody'" in err and "Traceback" not in err


async def test_without_the_built_in_server_the_command_says_how_to_turn_it_on(state_dir: Path) -> None:
    code, _, err = await cli(state_dir, "oauth", "clients")
    assert code != 0
    assert err.strip().splitlines() == [
        "hitl-mcp: the built-in OAuth server is off: set server.oauth.issuer: builtin (docs/remote.md)"
    ]
