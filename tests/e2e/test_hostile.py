"""Hostile input, generated: tool arguments, API bodies and query strings.

Whatever arrives, the answer is a clear error (a tool error or a 4xx), never a crash or a 5xx, and
nothing changes without valid credentials. Hypothesis runs in a worker thread and hands each example
to the event loop that serves the app.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind, Status
from tests.conftest import api_client, running, text_of

pytestmark = pytest.mark.anyio

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
edge_values = st.sampled_from(
    [
        0,
        -1,
        10**18,
        1.5,
        "",
        " ",
        "x" * 5000,
        [],
        ["web"],
        ["pager"],
        ["a", "a"],
        {"k": "v"},
        True,
        None,
        "\x00",
    ]
)
TOOL_FIELDS = {
    "ask_user": [
        "question", "choices", "allow_free_text", "context", "channels", "timeout_seconds", "default_answer",
        "idempotency_key",
    ],
    "request_approval": [
        "action", "details", "payload", "risk", "channels", "timeout_seconds", "idempotency_key",
    ],
    "notify_user": ["message", "title", "level", "channels"],
    "wait_for_response": ["request_id"],
    "cancel_request": ["request_id", "reason"],
}  # fmt: skip


def tool_calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    base = {
        "ask_user": {"question": "q"},
        "request_approval": {"action": "a"},
        "notify_user": {"message": "m"},
    }

    def for_tool(tool: str) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        keys = st.sampled_from([*TOOL_FIELDS[tool], "unexpected"])
        extra = st.dictionaries(keys, json_values | edge_values, max_size=3)
        args = st.builds(lambda more: {**base.get(tool, {}), **more}, extra)
        return st.tuples(st.just(tool), args)

    return st.one_of(*(for_tool(t) for t in TOOL_FIELDS))


async def in_thread(check: Callable[[], None]) -> None:
    await anyio.to_thread.run_sync(check)


def on_loop(fn: Callable[[], Awaitable[None]]) -> None:
    anyio.from_thread.run(fn)


async def test_tool_arguments_give_results_or_clear_errors(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        outcomes: set[str] = set()

        @SETTINGS
        @given(call=tool_calls())
        def check(call: tuple[str, dict[str, Any]]) -> None:
            tool, args = call
            if tool != "notify_user":
                args = {**args, "wait_seconds": 0}  # never block the run

            async def go() -> None:
                result = await client.call_tool(tool, args)
                if result.is_error:
                    text = text_of(result)
                    # a refusal by the tool, or bad arguments: one "argument: what is wrong" line each
                    lines = text.splitlines()
                    assert text.startswith("Error executing tool") or all(
                        re.match(r"^[\w.]+: \S", line) for line in lines
                    ), text
                    assert "errors.pydantic.dev" not in text
                    assert "Traceback" not in text
                    outcomes.add("error")
                else:
                    assert result.structured_content is not None
                    outcomes.add("ok")

            on_loop(go)

        await in_thread(check)
        assert outcomes == {"error", "ok"}


async def test_api_bodies_and_queries_never_5xx(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        broker = await rt.broker()
        ids = []
        for spec in (
            AskSpec(kind=Kind.QUESTION, text="Q?", choices=["a", "b"]),
            AskSpec(kind=Kind.QUESTION, text="Free?"),
            AskSpec(kind=Kind.APPROVAL, text="Act"),
        ):
            ids.append((await broker.ask(spec))[0].id)
        codes: set[int] = set()
        reply_keys = st.sampled_from(["text", "choice", "decision", "comment", "other"])

        @SETTINGS
        @given(
            body=json_values | st.dictionaries(reply_keys, json_values | edge_values, max_size=4),
            target=st.sampled_from([*ids, "nope", "%2e%2e", "x" * 300]),
            junk=st.one_of(st.none(), st.binary(max_size=300)),
            query=st.dictionaries(
                st.sampled_from(["status", "limit", "x"]), st.text(max_size=12), max_size=3
            ),
        )
        def check(body: Any, target: str, junk: bytes | None, query: dict[str, str]) -> None:
            async def go() -> None:
                if junk is not None:
                    r = await api.post(f"/api/requests/{target}/reply", content=junk)
                else:
                    r = await api.post(f"/api/requests/{target}/reply", json=body)
                assert r.status_code < 500, r.text
                codes.add(r.status_code)
                if r.status_code != 200:
                    assert r.json()["error"]
                listing = await api.get("/api/requests", params=query)
                assert listing.status_code in (200, 422), listing.text

            on_loop(go)

        await in_thread(check)
        assert {400, 404, 422} <= codes


async def test_no_state_change_without_credentials(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        broker = await rt.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Act"))
        api.headers.pop("Authorization")

        @SETTINGS
        @given(
            header=st.one_of(
                st.none(), st.text(max_size=60).map(lambda t: "Bearer " + t), st.text(max_size=60)
            ),
            cookie=st.one_of(st.none(), st.text(alphabet="0123456789abcdef", max_size=64)),
            csrf=st.one_of(st.none(), st.text(max_size=64)),
        )
        def check(header: str | None, cookie: str | None, csrf: str | None) -> None:
            async def go() -> None:
                headers = {}
                if header is not None and header.isprintable() and header.isascii():
                    headers["Authorization"] = header
                if csrf is not None and csrf.isprintable() and csrf.isascii():
                    headers["X-CSRF-Token"] = csrf
                cookies = {"hitl_session": cookie} if cookie else {}
                api.cookies.clear()
                r = await api.post(
                    f"/api/requests/{request.id}/reply",
                    json={"decision": "approve"},
                    headers=headers,
                    cookies=cookies,
                )
                assert r.status_code == 401

            on_loop(go)

        await in_thread(check)
        after = await broker.get_or_raise(request.id)
        assert after.status == Status.PENDING
        assert await broker.store.replies(request.id) == []
