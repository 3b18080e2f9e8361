"""Every text argument of every tool keeps the exact string the client sent (issue: text that
looks like JSON was refused, and "null" became no text at all).

Over a real stdio subprocess and real streamable HTTP, each text argument is sent values that look
like JSON, and read back through the HTTP API; then hypothesis sends arbitrary text to each.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from hitl_mcp.core.models import payload_sha256
from tests.conftest import (
    PYTHON,
    TOKEN,
    api_client,
    bearer,
    free_port,
    running,
    sc,
    serve_args,
    server_env,
    server_process,
    write_config,
)

pytestmark = pytest.mark.anyio

LOOKS_LIKE_JSON = [
    '{"command": "rm -rf build"}',
    '["a", "b"]',
    "42",
    "-1.5e3",
    "true",
    "false",
    "null",
    '"quoted"',
    'say "hi" \\ and \\n not a newline',
]

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextlib.asynccontextmanager
async def client_over(transport: str, tmp_path: Path, state_dir: Path) -> AsyncIterator[tuple[Client, str]]:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    base = f"http://127.0.0.1:{port}"
    if transport == "stdio":
        params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
        with open(tmp_path / "stderr.txt", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                yield client, base
    else:
        async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
            async with Client(bearer(f"{base}/mcp"), mode="legacy") as client:
                yield client, base


async def read(http: httpx2.AsyncClient, base: str, request_id: str) -> dict[str, Any]:
    for _ in range(50):  # over stdio the inbox starts beside the first tool call
        try:
            response = await http.get(f"{base}/api/requests/{request_id}", headers=AUTH)
            break
        except httpx2.ConnectError:
            await anyio.sleep(0.1)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_text_arguments_are_kept_exactly(tmp_path: Path, state_dir: Path, transport: str) -> None:
    async with client_over(transport, tmp_path, state_dir) as (client, base), httpx2.AsyncClient() as http:
        for n, value in enumerate(LOOKS_LIKE_JSON):
            asked = sc(
                await client.call_tool(
                    "ask_user",
                    {
                        "question": value,
                        "context": value,
                        "default_answer": value,
                        "idempotency_key": f"k{n}-{value.replace(' ', '_')}",
                        "wait_seconds": 0,
                    },
                )
            )
            approval = sc(
                await client.call_tool(
                    "request_approval",
                    {"action": value, "details": value, "payload": {"v": value}, "wait_seconds": 0},
                )
            )
            note = sc(await client.call_tool("notify_user", {"message": value, "title": value}))
            q = await read(http, base, asked["request_id"])
            assert (q["text"], q["context"], q["default_answer"]) == (value, value, value)
            a = await read(http, base, approval["request_id"])
            assert (a["text"], a["details"]) == (value, value)
            assert a["payload"] == {"v": value} and a["payload_sha256"] == payload_sha256({"v": value})
            m = await read(http, base, note["request_id"])
            assert (m["text"], m["title"]) == (value, value)
            cancelled = sc(
                await client.call_tool("cancel_request", {"request_id": asked["request_id"], "reason": value})
            )
            assert cancelled["comment"] == value
        # the empty string, where a field allows it, stays empty (not absent)
        empty = sc(
            await client.call_tool(
                "request_approval", {"action": "Tidy up", "details": "", "wait_seconds": 0}
            )
        )
        assert (await read(http, base, empty["request_id"]))["details"] == ""


async def test_a_json_looking_idempotency_key_is_the_same_key(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        args = {"question": "Which?", "idempotency_key": '{"k":1}', "wait_seconds": 0}
        a = sc(await client.call_tool("ask_user", args))
        b = sc(await client.call_tool("ask_user", args))
        assert a["request_id"] == b["request_id"]
        stored = await (await rt.broker()).get_or_raise(a["request_id"])
        assert stored.idempotency_key == '{"k":1}'


async def test_lists_and_payloads_are_still_parsed_for_clients_that_send_them_as_text(
    state_dir: Path,
) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        out = sc(
            await client.call_tool(
                "ask_user", {"question": "Pick", "choices": '["red", "blue"]', "wait_seconds": 0}
            )
        )
        stored = await (await rt.broker()).get_or_raise(out["request_id"])
        assert stored.choices == ["red", "blue"]


# ------------------------------------------------------------------------------- property-based


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[anyio.from_thread.BlockingPortal, Any]]:
    """One runtime, its MCP client and API client, for all examples (run in a portal thread)."""
    state_dir = tmp_path_factory.mktemp("state")

    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[tuple[Client, httpx2.AsyncClient]]:
        async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
            async with api_client(rt) as api:
                yield client, api

    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(session()) as clients,
    ):
        yield portal, clients


PLAIN = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=200)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | PLAIN,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(PLAIN, inner, max_size=3),
    max_leaves=6,
)
# arbitrary text, and text that is JSON (what the SDK used to parse into something else)
TEXT = PLAIN | JSON_VALUES.map(json.dumps).filter(lambda t: len(t) <= 200)
FIELDS = {
    "ask_user": ["question", "context", "default_answer"],
    "request_approval": ["action", "details"],
    "notify_user": ["message", "title"],
}
READ_AS = {"question": "text", "action": "text", "message": "text"}
REQUIRED = {"ask_user": "question", "request_approval": "action", "notify_user": "message"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tool=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_any_text_comes_back_unchanged(live: Any, tool: str, data: st.DataObject) -> None:
    portal, (client, api) = live
    field = data.draw(st.sampled_from(FIELDS[tool]))
    value = data.draw(TEXT)
    args: dict[str, Any] = {REQUIRED[tool]: "Plain text", field: value}
    if tool != "notify_user":
        args["wait_seconds"] = 0

    async def go() -> dict[str, Any]:
        out = sc(await client.call_tool(tool, args))
        response = await api.get(f"/api/requests/{out['request_id']}")
        assert response.status_code == 200
        return dict(response.json())

    stored = portal.call(go)
    assert stored[READ_AS.get(field, field)] == value
