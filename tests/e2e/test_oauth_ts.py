"""The TypeScript SDK's OAuth client (``tests/ts/oauth.mjs``) against the built-in authorization
server: from a bare 401 to registration, consent in headless Chromium, the code exchange, tool calls
and a refresh; then revocation makes its token refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest
from playwright.async_api import Browser

from tests.conftest import ROOT
from tests.e2e.test_oauth_sdk import CHROMIUM, Person, browser
from tests.support.oauth import callback_server, serve_oauth

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium); these tests always run in CI",
    ),
]
__all__ = ["browser"]  # the fixture

TS = ROOT / "tests" / "ts"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def node_project() -> None:
    if shutil.which("node") is None or not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        message = "the TypeScript OAuth test needs node and tests/ts/node_modules (npm ci --prefix tests/ts)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must install them")
        pytest.skip(message)


async def test_the_ts_sdk_client_registers_gets_consent_calls_and_refreshes(
    state_dir: Path, browser: Browser
) -> None:
    async with serve_oauth(state_dir) as served, callback_server() as callback:
        person = Person(browser, callback)
        env = {**os.environ, "HITL_MCP_URL": served.mcp, "HITL_CALLBACK": callback.url}
        async with await anyio.open_process(
            ["node", "oauth.mjs"], cwd=str(TS), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as node:
            assert node.stdout is not None and node.stdin is not None
            lines: list[dict[str, object]] = []
            buffer = b""
            with anyio.fail_after(60):
                async for chunk in node.stdout:
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        lines.append(json.loads(line))
                        if "authorize" in lines[-1]:
                            await person.redirect(str(lines[-1]["authorize"]))
                            await node.stdin.send((await person.code()).code.encode() + b"\n")
                    if lines and "result" in lines[-1]:
                        break
                assert await node.wait() == 0
        outcome = lines[-1]
        assert person.consents == ["TS SDK test client"]
        assert outcome["refreshed"] is True
        result = outcome["result"]
        assert isinstance(result, dict) and result.get("request_id")
        broker = await served.runtime.broker()
        assert len(await broker.store.list()) == 2  # both calls asked, the second after the refresh
        async with httpx2.AsyncClient() as http:
            r = await http.post(
                f"{served.url}/revoke",
                data={"token": outcome["access_token"], "client_id": outcome["client_id"]},
            )
            assert r.status_code == 200
            r = await http.post(
                served.mcp,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "Authorization": f"Bearer {outcome['access_token']}",
                    "Accept": "application/json, text/event-stream",
                },
            )
            assert r.status_code == 401
