"""What the upstream sends on its own, through the proxy: ``server-everything``'s progress, logging,
``list_changed``, elicitation and sampling tools, with the host's own callbacks answering (the SDK's
client, over stdio), on a 2025-11-25 connection (requests within the call) and on a 2026-07-28 one
(``InputRequiredResult`` and the retry that carries the answer)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp import types as mcp_types
from mcp.client import ClientRequestContext
from mcp.client.stdio import StdioServerParameters

from tests.conftest import text_of
from tests.gate.test_proxy import Gate, everything
from tests.support.events import Changes, until

pytestmark = pytest.mark.anyio

RELAY_POLICY = """
default: allow
sampling: allow
rules:
  - tools: [trigger-long-running-operation]
    action: ask
"""


class Host:
    """The host's side: its callbacks, and what they saw."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.changes = Changes()
        self.forms: list[mcp_types.ElicitRequestParams] = []
        self.samples: list[mcp_types.CreateMessageRequestParams] = []
        self.logs: list[mcp_types.LoggingMessageNotificationParams] = []
        self.notes: list[Any] = []
        self.steps: list[tuple[float, float | None, str | None]] = []

    async def elicit(self, ctx: ClientRequestContext, params: mcp_types.ElicitRequestParams) -> Any:
        self.forms.append(params)
        return mcp_types.ElicitResult(action="accept", content={"name": "Ada Lovelace"})

    async def sample(self, ctx: ClientRequestContext, params: mcp_types.CreateMessageRequestParams) -> Any:
        self.samples.append(params)
        text = mcp_types.TextContent(type="text", text="the host's model says hello")
        return mcp_types.CreateMessageResult(role="assistant", content=text, model="host-model")

    async def log(self, params: mcp_types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.changes.fire()

    async def message(self, message: Any) -> None:
        self.notes.append(message)
        self.changes.fire()

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.steps.append((progress, total, message))
        await self.gate.on_progress(progress, total, message)


@contextlib.asynccontextmanager
async def hosted(gate: Gate, host: Host, params: StdioServerParameters, mode: str) -> AsyncIterator[Client]:
    async with Client(
        params,
        mode=mode,
        read_timeout_seconds=60,
        elicitation_callback=host.elicit,
        sampling_callback=host.sample,
        logging_callback=host.log,
        message_handler=host.message,
        log_level="debug" if mode != "legacy" else None,  # 2026-07-28: a request opts in to log messages
    ) as client:
        yield client


async def gated_progress(gate: Gate, host: Host, client: Client) -> tuple[Any, str]:
    """The long-running tool, asked about first: the approval's heartbeats, then its own steps."""
    result: Any = None
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            nonlocal result
            arguments = {"duration": 1, "steps": 2}
            result = await client.call_tool(
                "trigger-long-running-operation", arguments, progress_callback=host.progress
            )

        tg.start_soon(call)
        request_id = await gate.waiting_request()
        await gate.reply(request_id, "approve")
    return result, request_id


async def test_a_2025_11_25_host_gets_the_upstreams_messages_and_answers_its_questions(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path, RELAY_POLICY)
    host = Host(gate)
    async with hosted(gate, host, gate.params(everything("stdio")), "legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        # it registers the tools that need the client's forms and model once connected, and says so
        await until(
            lambda: any(isinstance(n, mcp_types.ToolListChangedNotification) for n in host.notes),
            host.changes,
            seconds=30,
        )
        progressed, _ = await gated_progress(gate, host, client)
        elicited = await client.call_tool("trigger-elicitation-request", {})
        sampled = await client.call_tool("trigger-sampling-request", {"prompt": "Say hi"})
        toggled = await client.call_tool("toggle-simulated-logging", {})
        await until(lambda: host.logs or None, host.changes, seconds=30)  # every 5 s
        await client.call_tool("toggle-simulated-logging", {})
    assert {"trigger-elicitation-request", "trigger-sampling-request"} <= tools
    assert not progressed.is_error and "Long running operation completed" in text_of(progressed)
    # the approval's heartbeats first, then the upstream's own two steps, counting on from them
    values = [p for p, _, _ in host.steps]
    assert values == sorted(values) and len(set(values)) == len(values), host.steps
    (one, total, _), (two, total2, _) = host.steps[-2:]
    assert total == total2 and two == total and two - one == 1.0 and total > 2
    assert host.steps[0][2] is not None and "waiting for approval" in host.steps[0][2]

    assert not elicited.is_error and "Name: Ada Lovelace" in text_of(elicited)
    (form,) = host.forms
    assert form.message == "Please provide inputs for the following fields:"
    assert not sampled.is_error and "the host's model says hello" in text_of(sampled)
    (sample,) = host.samples
    assert "Say hi" in str(sample.messages[0].content)
    # server-everything's random levels, each with a message naming it ("Info-level message")
    assert not toggled.is_error and host.logs[0].level.lower() in str(host.logs[0].data).lower()


async def test_a_2026_07_28_host_answers_the_upstreams_questions_in_the_retry(tmp_path: Path) -> None:
    gate = Gate(tmp_path, RELAY_POLICY)
    host = Host(gate)
    async with hosted(gate, host, gate.params(everything("stdio")), "auto") as client:
        assert client.session.protocol_version == "2026-07-28"
        progressed, _ = await gated_progress(gate, host, client)
        elicited = await client.call_tool("trigger-elicitation-request", {})
        sampled = await client.call_tool("trigger-sampling-request", {"prompt": "Say hi"})
    assert not progressed.is_error, text_of(progressed)
    assert host.steps[-1][0] == host.steps[-1][1]  # the upstream's last step, on the host's token
    assert not elicited.is_error and "Name: Ada Lovelace" in text_of(elicited)
    assert len(host.forms) == 1  # asked once, answered once
    assert not sampled.is_error and "the host's model says hello" in text_of(sampled)
    assert len(host.samples) == 1


async def test_the_policy_decides_the_upstreams_questions(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: allow\nelicitation: deny\nsampling: ask\n")
    host = Host(gate)
    async with hosted(gate, host, gate.params(everything("stdio")), "legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        for answer in ("deny", "approve"):
            sampled: Any = None
            async with anyio.create_task_group() as tg:

                async def sample() -> None:
                    nonlocal sampled
                    sampled = await client.call_tool("trigger-sampling-request", {"prompt": "Say hi"})

                tg.start_soon(sample)
                pending = await gate.next_pending()  # the upstream asks; a person decides
                await gate.reply(pending["id"], answer)
            if answer == "deny":
                assert sampled.is_error and host.samples == [], text_of(sampled)
                assert pending["text"].startswith("Let node ") and "use the host's model" in pending["text"]
                assert "Say hi" in str(pending["payload"])
    # denied: the upstream was never told it may ask for forms, so it offers no such tool
    assert "trigger-elicitation-request" not in tools and "trigger-sampling-request" in tools
    assert not sampled.is_error and "the host's model says hello" in text_of(sampled)
    assert len(host.samples) == 1 and host.forms == []
