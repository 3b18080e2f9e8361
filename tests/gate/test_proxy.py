"""``hitl-mcp proxy`` against real upstreams: ``mcp-server-time`` (PyPI) and the TypeScript
``@modelcontextprotocol/server-everything`` (npm, ``tests/ts``) over stdio and streamable HTTP, and a
small marker server (``tests/support/marker_upstream.py``) whose tool leaves a visible mark.

The proxy runs as a subprocess spoken to by the SDK's own client; the person answers through the
proxy's JSON API (it serves the inbox beside stdio, as ``hitl-mcp serve`` does).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters

from hitl_mcp.core.models import payload_sha256
from tests.conftest import PYTHON, ROOT, TOKEN, cli, free_port, server_env, text_of, write_config
from tests.support.events import Changes, until
from tests.support.people import session_of

pytestmark = pytest.mark.anyio

EVERYTHING = (
    ROOT
    / "tests"
    / "ts"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
MARKER = [PYTHON, str(ROOT / "tests" / "support" / "marker_upstream.py")]


def time_server() -> list[str]:
    found = shutil.which("mcp-server-time") or str(Path(sys.executable).parent / "mcp-server-time")
    if not Path(found).exists():
        pytest.fail("mcp-server-time is not installed: pip install 'mcp-hitl[test]'")
    return [found]


def everything(*args: str) -> list[str]:
    if shutil.which("node") is None or not EVERYTHING.exists():
        message = "server-everything needs node and tests/ts/node_modules (npm ci --prefix tests/ts)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return ["node", str(EVERYTHING), *args]


class Gate:
    """A proxy's files and environment, and the person's side: its API."""

    def __init__(self, tmp_path: Path, policy: str, config: str = "") -> None:
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir(exist_ok=True)
        self.port = free_port()
        self.person: str | None = None
        self.config = write_config(tmp_path / "hitl.yaml", self.port, config)
        self.policy = tmp_path / "gate.yaml"
        self.policy.write_text(policy)
        self.marker = tmp_path / "marker.txt"
        self.env = server_env(self.state_dir, MARKER_FILE=str(self.marker))
        self.changes = Changes()
        self.progress: list[str] = []

    def params(
        self, upstream: list[str] | None = None, url: str | None = None, *more: str
    ) -> StdioServerParameters:
        args = ["-m", "hitl_mcp", "proxy", "--policy", str(self.policy), "--config", str(self.config)]
        args += more
        args += ["--upstream", url] if url else ["--", *(upstream or [])]
        return StdioServerParameters(command=PYTHON, args=args, env=self.env, cwd=str(ROOT))

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(message or "")
        self.changes.fire()

    async def waiting_request(self) -> str:
        """The id of the request the proxy said (in its first heartbeat) that the call waits for."""

        def seen() -> str | None:
            for message in self.progress:
                found = re.search(r"request ([0-9a-f]{16})", message)
                if found:
                    return found.group(1)
            return None

        return await until(seen, self.changes, seconds=30)

    def api(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {TOKEN}"}
        )

    async def reply(self, request_id: str, decision: str, comment: str | None = None) -> dict[str, Any]:
        async with self.api() as api:
            body = {"decision": decision, **({"comment": comment} if comment else {})}
            # as the operator (the web token), or as a person signed in to the inbox
            signed_in = await session_of(self.state_dir, self.person, self.port, TOKEN) if self.person else {}
            response = await api.post(f"/api/requests/{request_id}/reply", json=body, headers=signed_in)
            assert response.status_code == 200, response.text
            return dict(response.json())

    async def request(self, request_id: str) -> dict[str, Any]:
        async with self.api() as api:
            response = await api.get(f"/api/requests/{request_id}")
            assert response.status_code == 200, response.text
            return dict(response.json())

    async def next_pending(self) -> dict[str, Any]:
        """The first request that shows up pending, for a call that reports no heartbeats. The API
        has no push for a token holder (``/events`` is for inbox sessions), so its listing is read
        again every 50 ms until then."""
        async with self.api() as api:
            changes = Changes()

            async def pending() -> dict[str, Any] | None:
                listing = (await api.get("/api/requests?status=pending")).json()["requests"]
                return dict(listing[0]) if listing else None

            async def tick() -> None:
                while True:
                    await anyio.sleep(0.05)
                    changes.fire()

            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                request = await until(pending, changes, seconds=30)
                tg.cancel_scope.cancel()
            return await self.request(request["id"])

    def marks(self) -> list[str]:
        return self.marker.read_text().splitlines() if self.marker.exists() else []


@contextlib.asynccontextmanager
async def connected(target: StdioServerParameters | str) -> AsyncIterator[Client]:
    async with Client(target, mode="legacy", read_timeout_seconds=60) as client:
        yield client


async def answered_call(
    gate: Gate,
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    decision: str,
    comment: str | None = None,
) -> tuple[Any, str]:
    """Call ``tool`` through the proxy, and answer the approval it waits for through the API."""
    result: Any = None
    gate.progress.clear()  # the request named from here on is this call's
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            nonlocal result
            result = await client.call_tool(tool, arguments, progress_callback=gate.on_progress)

        tg.start_soon(call)
        request_id = await gate.waiting_request()
        await gate.reply(request_id, decision, comment)
    return result, request_id


# --- mcp-server-time --------------------------------------------------------------------------

TIME_POLICY = """
rules:
  - tools: [get_current_time]
    action: allow
  - tools: [convert_time]
    action: ask
    risk: low
    description: >-
      Convert {{ arguments.time }} from {{ arguments.source_timezone }}
      to {{ arguments.target_timezone }}
"""


async def test_time_tools_listed_as_upstream_lists_them_and_allow_passes(tmp_path: Path) -> None:
    gate = Gate(tmp_path, TIME_POLICY)
    async with connected(StdioServerParameters(command=time_server()[0])) as direct:
        upstream_tools = (await direct.list_tools()).tools
    async with connected(gate.params(time_server())) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("get_current_time", {"timezone": "Asia/Tokyo"})
    # as the upstream lists them; on 2025-11-25 each may run as a task (a call may wait for a person)
    assert [t.model_dump(exclude={"execution"}) for t in tools] == [
        t.model_dump(exclude={"execution"}) for t in upstream_tools
    ]
    assert {t.execution.task_support for t in tools if t.execution} == {"optional"}
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert result.structured_content["timezone"] == "Asia/Tokyo"
    assert gate.progress == []  # no approval was asked


async def test_time_ask_approved_forwards_exactly_the_approved_arguments(tmp_path: Path) -> None:
    gate = Gate(tmp_path, TIME_POLICY)
    arguments = {"source_timezone": "UTC", "time": "10:00", "target_timezone": "Asia/Tokyo"}
    async with connected(gate.params(time_server())) as client:
        result, request_id = await answered_call(gate, client, "convert_time", arguments, "approve")
        request = await gate.request(request_id)
    assert not result.is_error, text_of(result)
    assert result.structured_content["target"]["timezone"] == "Asia/Tokyo"
    assert result.structured_content["target"]["datetime"].endswith("19:00:00+09:00")
    assert request["payload"] == {"tool": "convert_time", "arguments": arguments}
    assert request["text"] == "Convert 10:00 from UTC to Asia/Tokyo"
    assert request["risk"] == "low"
    assert "forwarded" in [row["event"] for row in request["audit"]]


# --- the marker upstream: proof the upstream was never called ---------------------------------


async def test_denied_by_the_person_is_a_tool_error_and_never_calls_the_upstream(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    async with connected(gate.params(MARKER)) as client:
        result, _ = await answered_call(gate, client, "touch", {"name": "db"}, "deny", "not on a Friday")
        assert result.is_error
        assert "denied by" in text_of(result) and "not on a Friday" in text_of(result)
        assert gate.marks() == []
        # the same upstream, approved: the mark appears, so its absence above meant something
        result, _ = await answered_call(gate, client, "touch", {"name": "db"}, "approve")
    assert not result.is_error, text_of(result)
    assert gate.marks() == ["db plain"]


async def test_policy_deny_and_default_deny_never_ask_nor_call(tmp_path: Path) -> None:
    policy = """
default: deny
rules:
  - tools: [touch]
    when: [{path: mode, matches: "^force"}]
    action: deny
    reason: not on a Friday
  - tools: [touch]
    action: allow
"""
    gate = Gate(tmp_path, policy)
    async with connected(gate.params(MARKER)) as client:
        denied = await client.call_tool("touch", {"name": "a", "mode": "force-push"})
        unmatched = await client.call_tool("crash", {})
        allowed = await client.call_tool("touch", {"name": "b"})
    assert denied.is_error and text_of(denied) == "denied by policy: not on a Friday"
    assert unmatched.is_error and "no rule allows it" in text_of(unmatched)
    assert not allowed.is_error
    assert gate.marks() == ["b plain"]


async def test_unmatched_tools_ask_by_default(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "rules: []\n")
    async with connected(gate.params(MARKER)) as client:
        result, request_id = await answered_call(gate, client, "touch", {"name": "x", "mode": "m"}, "approve")
        request = await gate.request(request_id)
    assert not result.is_error, text_of(result)
    assert request["text"] == "Call the tool `touch`"
    assert gate.marks() == ["x m"]


async def test_payload_changed_after_approval_is_not_forwarded(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    async with connected(gate.params(MARKER)) as client:
        result: Any = None
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                nonlocal result
                result = await client.call_tool("touch", {"name": "safe"}, progress_callback=gate.on_progress)

            tg.start_soon(call)
            request_id = await gate.waiting_request()
            # someone with the database rewrites the stored arguments before the person approves
            with sqlite3.connect(gate.state_dir / "hitl.sqlite3") as db:
                changed = db.execute(
                    "UPDATE requests SET body = json_set(body, '$.payload.arguments.name', 'evil') "
                    "WHERE id = ?",
                    (request_id,),
                ).rowcount
            assert changed == 1
            # the approval is refused when it comes (the payload no longer hashes to what was asked)
            async with gate.api() as api:
                refused = await api.post(f"/api/requests/{request_id}/reply", json={"decision": "approve"})
            assert refused.status_code == 403 and "the payload changed after it was asked" in refused.text
            await gate.reply(request_id, "deny")
    assert result.is_error
    assert "denied" in text_of(result)
    assert gate.marks() == []


async def test_upstream_crash_is_a_tool_error_and_the_next_call_restarts_it(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: allow\nunannotated: allow\n")
    async with connected(gate.params(MARKER)) as client:
        crashed = await client.call_tool("crash", {})
        after = await client.call_tool("touch", {"name": "again"})
    assert crashed.is_error and "went away" in text_of(crashed)
    assert not after.is_error, text_of(after)
    assert gate.marks() == ["again plain"]


async def test_a_policy_error_names_file_line_and_key(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "rules:\n  - tools: [touch]\n    action: maybe\n")
    code, _, err = await cli(
        gate.state_dir,
        "proxy",
        "--config",
        str(gate.policy),
        "--server-config",
        str(gate.config),
        "--",
        "true",
    )
    assert code == 2
    assert f"{gate.policy}:3: rules[0].action: expected 'allow', 'ask' or 'deny', got 'maybe'" in err
    code, _, err = await cli(gate.state_dir, "proxy", "--config", str(gate.policy))
    assert code != 0 and "name one upstream" in err


# --- server-everything (TypeScript) -------------------------------------------------------------

EVERYTHING_POLICY = """
default: allow
rules:
  - tools: [echo]
    action: ask
    description: "Echo {{ arguments.message }}"
"""


async def test_everything_resources_and_prompts_pass_through_unchanged(tmp_path: Path) -> None:
    gate = Gate(tmp_path, EVERYTHING_POLICY)
    command = everything("stdio")
    async with connected(StdioServerParameters(command=command[0], args=command[1:])) as direct:
        want_resources = (await direct.list_resources()).resources
        want_templates = (await direct.list_resource_templates()).resource_templates
        want_prompts = (await direct.list_prompts()).prompts
        first = want_resources[0].uri
        want_read = await direct.read_resource(first)
        want_prompt = await direct.get_prompt("simple-prompt")
    async with connected(gate.params(command)) as client:
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        prompts = (await client.list_prompts()).prompts
        read = await client.read_resource(first)
        prompt = await client.get_prompt("simple-prompt")
        summed = await client.call_tool("get-sum", {"a": 2, "b": 3})
    assert [r.model_dump() for r in resources] == [r.model_dump() for r in want_resources]
    assert [t.model_dump() for t in templates] == [t.model_dump() for t in want_templates]
    assert [p.model_dump() for p in prompts] == [p.model_dump() for p in want_prompts]
    assert read.model_dump() == want_read.model_dump()
    assert prompt.model_dump() == want_prompt.model_dump()
    assert not summed.is_error and "5" in text_of(summed)


async def test_everything_over_stdio_ask_approved(tmp_path: Path) -> None:
    gate = Gate(tmp_path, EVERYTHING_POLICY)
    async with connected(gate.params(everything("stdio"))) as client:
        result, request_id = await answered_call(gate, client, "echo", {"message": "hello"}, "approve")
        request = await gate.request(request_id)
    assert not result.is_error and text_of(result) == "Echo: hello"
    assert request["text"] == "Echo hello"


async def test_everything_over_streamable_http(tmp_path: Path) -> None:
    gate = Gate(tmp_path, EVERYTHING_POLICY)
    port = free_port()
    command = everything("streamableHttp")
    env = {**os.environ, "PORT": str(port)}
    async with await anyio.open_process(command, env=env, stdin=-1, stdout=-1, stderr=-1) as upstream:
        lines: list[str] = []
        changes = Changes()

        async def drain() -> None:
            assert upstream.stderr is not None
            async for chunk in upstream.stderr:
                lines.append(chunk.decode(errors="replace"))
                changes.fire()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await until(lambda: "listening on port" in "".join(lines), changes, seconds=30)
            async with connected(gate.params(url=f"http://127.0.0.1:{port}/mcp")) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                denied, _ = await answered_call(gate, client, "echo", {"message": "no"}, "deny")
                approved, _ = await answered_call(gate, client, "echo", {"message": "yes"}, "approve")
            upstream.terminate()
            tg.cancel_scope.cancel()
    assert {"echo", "get-sum"} <= tools
    assert denied.is_error and "denied by" in text_of(denied)
    assert not approved.is_error and text_of(approved) == "Echo: yes"


async def test_an_upstream_timeout_is_a_tool_error_and_the_connection_stays(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: allow\n")
    async with connected(gate.params(everything("stdio"), None, "--call-timeout", "1")) as client:
        slow = await client.call_tool("trigger-long-running-operation", {"duration": 5, "steps": 5})
        quick = await client.call_tool("echo", {"message": "still here"})
    assert slow.is_error and "did not answer within 1 s" in text_of(slow)
    assert not quick.is_error and text_of(quick) == "Echo: still here"


async def test_an_upstream_that_cannot_start_is_an_error_naming_it(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: allow\n")
    missing = str(tmp_path / "no-such-server")
    async with connected(gate.params([missing])) as client:
        with pytest.raises(MCPError) as listing:
            await client.list_tools()
        called = await client.call_tool("anything", {})
    assert f"cannot start the upstream {missing}" in listing.value.message
    assert called.is_error and f"cannot start the upstream {missing}" in text_of(called)


async def test_a_rules_people_are_asked_and_credited(tmp_path: Path) -> None:
    policy = """
rules:
  - tools: [touch]
    when: [{path: mode, equals: stranger}]
    action: ask
    to: [nobody]
  - tools: [touch]
    action: ask
    to: [owner]
"""
    people = "channels:\n  web: {type: web}\npeople:\n  owner: {terminal: owner}\n"
    gate = Gate(tmp_path, policy, people)
    gate.person = "owner"
    async with connected(gate.params(MARKER)) as client:
        result, request_id = await answered_call(gate, client, "touch", {"name": "n"}, "approve")
        request = await gate.request(request_id)
        unknown = await client.call_tool("touch", {"name": "s", "mode": "stranger"})
    assert not result.is_error, text_of(result)
    answered = [row for row in request["audit"] if row["event"] == "answered"]
    assert answered and answered[0]["data"].get("person") == "owner"
    assert unknown.is_error and "unknown person 'nobody'" in text_of(unknown)
    assert gate.marks() == ["n plain"]


# --- remembered answers and the pause -----------------------------------------------------------


async def test_a_rule_lets_a_gated_call_through_and_a_pause_refuses_it(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    pattern = '{"match": {"name": {"glob": "d*"}}}'
    code, _, err = await cli(
        gate.state_dir, "rules", "add", "--agent", "*", "--tool", "touch", "--arguments", pattern
    )
    assert code == 0, err
    async with connected(gate.params(MARKER)) as client:
        result = await client.call_tool("touch", {"name": "db"})  # nobody answers: the rule does
        assert not result.is_error, text_of(result)
        assert gate.marks() == ["db plain"]
        assert (await cli(gate.state_dir, "pause", "--reason", "freeze"))[0] == 0
        result = await client.call_tool("touch", {"name": "disk"})
        assert result.is_error and "paused by" in text_of(result) and "freeze" in text_of(result)
        assert gate.marks() == ["db plain"]
    code, listed, _ = await cli(gate.state_dir, "rules", "list", "--json")
    assert [r["fired"] for r in json.loads(listed)] == [1]


async def test_the_proxy_records_the_outcome_of_what_it_forwarded(tmp_path: Path) -> None:
    """What happened after the approval, recorded by the proxy itself before the host hears it: the
    upstream's answer as ``executed`` with the SHA-256 of its result, its failure as ``failed`` with
    the error; each with a second receipt, linked to the decision's."""
    gate = Gate(tmp_path, "default: ask\nunannotated: ask\n")
    async with connected(gate.params(MARKER)) as client:
        done, done_id = await answered_call(gate, client, "touch", {"name": "db"}, "approve")
        crashed, crashed_id = await answered_call(gate, client, "crash", {}, "approve")
        finished = await gate.request(done_id)
        failed = await gate.request(crashed_id)
        async with gate.api() as api:
            listed = (await api.get(f"/api/requests/{done_id}/receipt")).json()["receipts"]
    assert not done.is_error and crashed.is_error
    (executed,) = [row for row in finished["audit"] if row["event"] == "outcome_reported"]
    assert executed["actor"] == "proxy" and executed["data"]["status"] == "executed"
    wired = done.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert executed["data"]["result_sha256"] == payload_sha256(wired)
    (error,) = [row for row in failed["audit"] if row["event"] == "outcome_reported"]
    assert error["data"]["status"] == "failed" and "went away" in error["data"]["summary"]
    assert [r["kind"] for r in listed] == ["hitl.decision", "hitl.outcome"]
