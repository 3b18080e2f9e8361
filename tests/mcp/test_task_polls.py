"""What a waiting task costs: a ``tasks/get`` of a task still working is answered from memory
(``mcp/tasks/memory.py``, ahead of the SDK over HTTP: ``fast.py``), the same answer the row gives,
until anything happens to the request, in this process or another sharing the store; and the
interval a host is told grows with the task's age and the load (``pace.py``).

The server runs in this process (uvicorn on 127.0.0.1), its clients are raw 2026-07-28 POSTs, as
Claude Code sends them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hitl_mcp.core.models import Kind, Reply, Request, now
from hitl_mcp.mcp.tasks import EXTENSION, TasksExtension
from hitl_mcp.mcp.tasks.memory import TaskMemory
from hitl_mcp.mcp.tasks.pace import MAX_POLL_SECONDS, poll_ms
from hitl_mcp.runtime import Runtime
from tests.conftest import TOKEN, make_config, running
from tests.support.events import Changes, until
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

VERSION = "2026-07-28"


def meta(name: str = "claude-code") -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
    }


class Agent:
    """A 2026-07-28 client over streamable HTTP, one POST per request."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http, self.url, self.number = http, url, 0

    async def rpc(self, method: str, name: str, params: dict[str, Any]) -> dict[str, Any]:
        self.number += 1
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
            "Mcp-Name": name,
        }
        body = {"jsonrpc": "2.0", "id": self.number, "method": method, "params": params}
        response = await self.http.post(self.url, json=body, headers=headers)
        assert response.headers["content-type"].startswith("application/json")
        data: dict[str, Any] = response.json()
        assert response.status_code == (400 if "error" in data else 200), response.text
        assert data["id"] == self.number
        return data

    async def ask(self, question: str) -> str:
        params = {"name": "ask_user", "arguments": {"question": question}, "_meta": meta()}
        result = (await self.rpc("tools/call", "ask_user", params))["result"]
        assert result["resultType"] == "task", result
        return str(result["taskId"])

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.rpc("tasks/get", task_id, {"taskId": task_id, "_meta": meta()})


@contextlib.asynccontextmanager
async def served(runtime: Runtime, token: str = TOKEN) -> AsyncIterator[Agent]:
    mcp = runtime.build_mcp()
    app = runtime.http_app(mcp, "http", "127.0.0.1")
    async with mcp.session_manager.run(), serving(app) as base:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            yield Agent(http, f"{base}/mcp")


def counting(runtime: Runtime) -> list[str]:
    """The ids of every request row the broker's store reads from now on."""
    broker = runtime._broker
    assert broker is not None
    reads: list[str] = []
    get = broker.store.get

    async def counted(request_id: str) -> Request | None:
        reads.append(request_id)
        return await get(request_id)

    broker.store.get = counted  # type: ignore[method-assign]
    return reads


async def test_polls_of_a_working_task_read_no_row_and_say_what_the_row_says(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled: list[str] = []  # the polls that reached the SDK's handler of tasks/get
    sdk_get = TasksExtension._get

    async def counted(self: TasksExtension, ctx: Any, params: Any) -> dict[str, Any]:
        handled.append(params.task_id)
        return await sdk_get(self, ctx, params)

    monkeypatch.setattr(TasksExtension, "_get", counted)
    async with running(state_dir) as runtime, served(runtime) as agent:
        task_id = await agent.ask("Deploy now?")
        first = await agent.get(task_id)  # read from the row
        reads = counting(runtime)
        later = [await agent.get(task_id) for _ in range(5)]
        assert reads == []  # nobody answered: the task was known to be working
        assert handled == [task_id]  # and over HTTP, answered ahead of the SDK
        for answer in later:
            assert answer["jsonrpc"] == "2.0"
            known, read = answer["result"], first["result"]
            assert known["statusMessage"].split(" — ")[0] == read["statusMessage"].split(" — ")[0]
            assert {k: v for k, v in known.items() if k != "statusMessage"} == {
                k: v for k, v in read.items() if k != "statusMessage"
            }
        assert first["result"]["status"] == "working" and first["result"]["ttlMs"] > 0


async def test_an_answer_reaches_the_next_poll_at_once(state_dir: Path) -> None:
    async with running(state_dir) as runtime, served(runtime) as agent:
        task_id = await agent.ask("Deploy now?")
        assert (await agent.get(task_id))["result"]["status"] == "working"
        assert (await agent.get(task_id))["result"]["status"] == "working"
        broker = await runtime.broker()
        await broker.resolve(task_id, Reply(channel="web", responder="owner", text="yes"))
        done = (await agent.get(task_id))["result"]
        assert done["status"] == "completed" and done["result"]["structuredContent"]["answer"] == "yes"


async def test_an_answer_written_by_another_process_reaches_the_next_polls(state_dir: Path) -> None:
    """Two servers on one SQLite file: the one polled learns of the answer through its change feed."""
    async with (
        running(state_dir) as here,
        served(here) as agent,
        running(state_dir, make_config()) as there,
    ):
        task_id = await agent.ask("Deploy now?")
        assert (await agent.get(task_id))["result"]["status"] == "working"
        reads = counting(here)
        assert (await agent.get(task_id))["result"]["status"] == "working"
        assert reads == []  # known as working
        changes = Changes()  # what this server's change feed hears (SQLite: a poll every 0.5 s)
        (await here.broker()).listen(lambda request_id, event: changes.fire())
        other = await there.broker()
        await other.resolve(task_id, Reply(channel="web", responder="owner", text="yes"))

        async def completed() -> bool:
            return bool((await agent.get(task_id))["result"]["status"] == "completed")

        await until(completed, changes)
        assert reads == [task_id]  # read once more, after the change


async def test_someone_elses_task_is_no_task_even_when_known(state_dir: Path) -> None:
    config = make_config("agents:\n  ci-bot: {token: ci-bot-token-0123456789}\n")
    async with running(state_dir, config) as runtime, served(runtime) as agent:
        task_id = await agent.ask("Deploy now?")
        assert (await agent.get(task_id))["result"]["status"] == "working"
        async with served(runtime, "ci-bot-token-0123456789") as other:
            answer = await other.get(task_id)
        assert answer["error"]["code"] == -32602 and "not found" in answer["error"]["message"]


async def test_a_change_while_the_row_is_read_leaves_nothing_stale() -> None:
    memory = TaskMemory()
    created = now()
    request = Request(
        id="t1", kind=Kind.QUESTION, text="q", channels=["web"], owner="operator", created_at=created
    )
    memory.reading("t1")
    memory.changed("t1", "answered")  # committed after the read took its snapshot
    memory.read("t1", request)
    assert memory.working("t1", "operator", created) is None
    memory.reading("t1")
    memory.read("t1", request)
    assert memory.working("t1", "operator", created) is not None
    assert memory.working("t1", "agent:other", created) is None
    memory.changed("", "resumed")  # every deadline moved
    assert memory.working("t1", "operator", created) is None


@pytest.mark.parametrize(
    ("age", "pending", "expected"),
    [
        (0.0, 1, 2000),  # just asked: the floor
        (40.0, 1, 2000),
        (120.0, 1, 6000),  # a twentieth of its age
        (600.0, 1, 30000),
        (86400.0, 1, int(MAX_POLL_SECONDS * 1000)),  # the cap
        (0.0, 10_000, 80_000),  # the load: 125 polls/s in all (POLL_BUDGET)
        (0.0, 10_000_000, int(MAX_POLL_SECONDS * 1000)),
    ],
)
def test_the_interval_grows_with_age_and_load(age: float, pending: int, expected: int) -> None:
    assert poll_ms(2000, age, pending) == expected


def test_a_task_that_is_listened_to_is_polled_rarely() -> None:
    assert poll_ms(2000, 0.0, 1, listened=True) == int(MAX_POLL_SECONDS * 1000)
