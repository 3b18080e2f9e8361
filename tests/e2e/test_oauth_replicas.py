"""Two replicas on one PostgreSQL database share the built-in authorization server's state: a client
registered and a token issued by one is honoured by the other, a refresh at one rotates the tokens
for both, and a revocation at one is refused by the other from its next request."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from mcp import Client

from hitl_mcp.core.principal import of_owner
from tests.conftest import bearer
from tests.support.oauth import grant, serve_oauth, tokens

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


async def status(http: httpx2.AsyncClient, mcp: str, token: str) -> int:
    r = await http.post(mcp, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {token}"})
    return r.status_code


async def test_a_token_issued_by_one_replica_is_honoured_and_revoked_by_the_other(
    tmp_path: Path, postgres_url: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with serve_oauth(tmp_path / "a", store=postgres_url) as one:
        # the other replica answers for the same public address (a balancer's, in production)
        async with serve_oauth(tmp_path / "b", store=postgres_url, url=one.url) as other:
            async with httpx2.AsyncClient() as http:
                issued = await grant(http, one.url)
                async with Client(bearer(other.mcp, issued["access_token"])) as client:
                    assert not (await client.call_tool("notify_user", {"message": "via the other"})).is_error
                broker = await other.runtime.broker()
                (request,) = await broker.store.list()
                assert of_owner(request.owner).kind == "oauth"

                r = await tokens(
                    http,
                    other.url,
                    grant_type="refresh_token",
                    refresh_token=issued["refresh_token"],
                    client_id=issued["client_id"],
                )
                assert r.status_code == 200, r.text  # the client registered at one, refreshed at the other
                fresh = r.json()
                assert await status(http, one.mcp, issued["access_token"]) == 401  # rotated away
                assert await status(http, one.mcp, fresh["access_token"]) == 200

                r = await http.post(
                    f"{one.url}/revoke",
                    data={"token": fresh["refresh_token"], "client_id": issued["client_id"]},
                )
                assert r.status_code == 200
                assert await status(http, other.mcp, fresh["access_token"]) == 401
