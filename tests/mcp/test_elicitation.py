"""The host's own window as a channel: MCP elicitation through the SDK's own client, in both eras.

Handshake era ("legacy"): the form is an ``elicitation/create`` request that races the web inbox
while the call waits. 2026-07-28 ("auto" in process): the form travels in an ``InputRequiredResult``
and the client retries with the answer.
"""

from __future__ import annotations

import contextlib
import logging
import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp import types as mcp_types
from mcp.client import ClientRequestContext

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import elicitation
from hitl_mcp.config import Config, parse_config
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.kit.state_key import STATE_KEY_FILE
from hitl_mcp.mcp.host_forms import FORM_KEY
from hitl_mcp.runtime import Runtime
from hitl_mcp.web.auth import WebAuth
from hitl_mcp.web.links import RequestLinks
from tests.conftest import (
    PYTHON,
    TOKEN,
    api_client,
    free_port,
    running,
    sc,
    serve_args,
    server_env,
    text_of,
    write_config,
)

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]


def form_config(extra: str = "") -> Config:
    return parse_config(
        f"""
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web, token: {TOKEN}}}
  elicitation: {{type: elicitation}}
{extra}
""",
        source="test.yaml",
    )


class Host:
    """An elicitation callback that records what it was shown and answers from a script."""

    def __init__(self, *answers: mcp_types.ElicitResult) -> None:
        self.answers = list(answers)
        self.shown: list[mcp_types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestFormParams)
        self.shown.append(params)
        return self.answers.pop(0)


def accept(**content: Any) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action="accept", content=content)


def events_of(broker: Broker, wanted: str) -> anyio.Event:
    """An event set the first time the audit log records ``wanted`` (any request)."""
    seen = anyio.Event()
    broker.listen(lambda request_id, event: seen.set() if event == wanted else None)
    return seen


# ------------------------------------------------------------------------------------- answering


@pytest.mark.parametrize("mode", MODES)
async def test_choice_question_answered_in_the_form(state_dir: Path, mode: str) -> None:
    host = Host(accept(choice="blue"))
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client,
    ):
        out = sc(
            await client.call_tool(
                "ask_user",
                {"question": "Which colour?", "choices": ["red", "blue"], "wait_seconds": 30},
            )
        )
        assert out["status"] == "answered"
        assert (out["answer"], out["choice"], out["channel"]) == ("blue", "blue", "elicitation")
        assert out["responder"] == "host form (mcp)"
        (shown,) = host.shown
        assert shown.message.startswith("Which colour?")
        assert "Also sent via web" in shown.message
        assert shown.requested_schema["properties"] == {
            "choice": {"type": "string", "title": "Answer", "enum": ["red", "blue"]}
        }
        assert shown.requested_schema["required"] == ["choice"]
        broker = await rt.broker()
        audit = [row.event for row in await broker.store.audit(out["request_id"])]
        assert "form_offered" in audit and "answered" in audit


@pytest.mark.parametrize("mode", MODES)
async def test_approval_denied_in_the_form(state_dir: Path, mode: str) -> None:
    host = Host(accept(decision="deny", comment="not on a Friday"))
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client,
    ):
        out = sc(
            await client.call_tool(
                "request_approval",
                {
                    "action": "Deploy v2 to prod",
                    "payload": {"tag": "v2"},
                    "risk": "high",
                    "wait_seconds": 30,
                },
            )
        )
        assert out["status"] == "answered" and out["approved"] is False
        assert out["comment"] == "not on a Friday" and out["channel"] == "elicitation"
        (shown,) = host.shown
        # high risk: the form may deny, never approve (channels.<name>.approvals)
        assert shown.requested_schema["properties"]["decision"]["enum"] == ["deny"]
        assert shown.requested_schema["required"] == []
        assert "comment" in shown.requested_schema["properties"]
        assert "Risk: high" in shown.message and out["payload_sha256"] in shown.message


@pytest.mark.parametrize("mode", MODES)
async def test_answer_that_does_not_fit_shows_the_form_again(state_dir: Path, mode: str) -> None:
    host = Host(accept(answer="   "), accept(answer="eu-west-1"))
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client,
    ):
        out = sc(await client.call_tool("ask_user", {"question": "Which region?", "wait_seconds": 30}))
        assert out["status"] == "answered" and out["answer"] == "eu-west-1"
        first, second = host.shown
        assert first.requested_schema["properties"]["answer"]["type"] == "string"
        assert second.message.startswith("That answer does not fit: the answer is empty")


# ---------------------------------------------------------------------------- decline and cancel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("action", "event"), [("decline", "form_declined"), ("cancel", "form_dismissed")])
async def test_declined_form_leaves_the_request_open_elsewhere(
    state_dir: Path, mode: str, action: str, event: str
) -> None:
    host = Host(mcp_types.ElicitResult(action=action))  # type: ignore[arg-type]
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client,
        api_client(rt) as api,
    ):
        broker = await rt.broker()
        declined = events_of(broker, event)
        outcome: dict[str, Any] = {}

        async def call() -> None:
            outcome.update(sc(await client.call_tool("ask_user", {"question": "Name?", "wait_seconds": 30})))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(10):
                await declined.wait()
            (pending,) = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
            reply = await api.post(f"/api/requests/{pending['id']}/reply", json={"text": "Sam"})
            assert reply.status_code == 200, reply.text
        assert outcome["status"] == "answered" and outcome["channel"] == "web" and outcome["answer"] == "Sam"
        assert len(host.shown) == 1
        # once this person said no here, waiting on the request again does not show the form again
        later = sc(await client.call_tool("ask_user", {"question": "Later?", "wait_seconds": 0}))
        host.answers.append(mcp_types.ElicitResult(action=action))  # type: ignore[arg-type]
        args = {"request_id": later["request_id"], "wait_seconds": 0.2}
        assert sc(await client.call_tool("wait_for_response", args))["status"] == "pending"
        assert len(host.shown) == 2
        assert sc(await client.call_tool("wait_for_response", args))["status"] == "pending"
        assert len(host.shown) == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("action", "reason"),
    [("decline", "declined in the host's form"), ("cancel", "dismissed the host's form without answering")],
)
async def test_declined_form_as_only_channel_settles_the_request(
    state_dir: Path, mode: str, action: str, reason: str
) -> None:
    host = Host(mcp_types.ElicitResult(action=action), mcp_types.ElicitResult(action=action))  # type: ignore[arg-type]
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client,
    ):
        approval = sc(
            await client.call_tool(
                "request_approval", {"action": "Reboot", "channels": ["elicitation"], "wait_seconds": 30}
            )
        )
        assert approval["status"] == "cancelled" and approval["approved"] is False
        assert approval["comment"] == reason
        question = sc(
            await client.call_tool(
                "ask_user", {"question": "Why?", "channels": ["elicitation"], "wait_seconds": 30}
            )
        )
        assert question["status"] == "cancelled" and question["comment"] == reason
        assert question["waited_seconds"] < 10


# --------------------------------------------------------------------------------- no capability


@pytest.mark.parametrize("mode", MODES)
async def test_without_the_capability_the_form_is_skipped_and_logged_once(
    state_dir: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hitl_mcp.mcp.server")
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode) as client,
        api_client(rt) as api,
    ):
        first = sc(await client.call_tool("ask_user", {"question": "One?", "wait_seconds": 0.2}))
        assert first["status"] == "pending"
        assert "Nobody was reached" not in first["next_step"]  # the web inbox has it
        second = sc(await client.call_tool("ask_user", {"question": "Two?", "wait_seconds": 0.2}))
        assert second["status"] == "pending"
        # with the form as the only channel, nothing can answer: the call does not wait
        alone = sc(
            await client.call_tool(
                "request_approval", {"action": "Reboot", "channels": ["elicitation"], "wait_seconds": 60}
            )
        )
        assert alone["status"] == "pending" and alone["waited_seconds"] < 5
        assert alone["next_step"].startswith("Nobody was reached")
        assert "no elicitation capability" in alone["next_step"]
        lines = [r.getMessage() for r in caplog.records if "form is skipped" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "no elicitation capability" in lines[0]
        reply = await api.post(f"/api/requests/{first['request_id']}/reply", json={"text": "yes"})
        assert reply.status_code == 200


@pytest.mark.parametrize("mode", MODES)
async def test_a_form_the_client_cannot_show_is_left_out_of_what_everyone_reads(
    state_dir: Path, mode: str
) -> None:
    ticks: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        ticks.append(message)

    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode) as client,  # no elicitation capability
        api_client(rt) as api,
    ):
        result = await client.call_tool(
            "ask_user", {"question": "Which?", "wait_seconds": 1}, progress_callback=on_progress
        )
        out = sc(result)
        text = text_of(result)
        assert "sent via web)" in text and "elicitation" not in text
        assert ticks and all(t and "elicitation" not in t for t in ticks)
        shown = (await api.get(f"/api/requests/{out['request_id']}")).json()
        assert shown["channels"] == ["web"]
        broker = await rt.broker()
        (skipped,) = [r for r in await broker.store.audit(out["request_id"]) if r.event == "channel_skipped"]
        assert skipped.data == {
            "channel": "elicitation",
            "reason": "skipped: the MCP client does not support forms or links (no elicitation capability)",
        }
        assert [d.channel for d in await broker.store.deliveries(out["request_id"])] == ["web"]


async def test_no_form_when_the_call_may_not_wait(state_dir: Path) -> None:
    host = Host()
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="legacy", elicitation_callback=host) as client,
    ):
        out = sc(await client.call_tool("ask_user", {"question": "Later?", "wait_seconds": 0}))
        assert out["status"] == "pending" and host.shown == []


# ------------------------------------------------------------------------------------- the race


async def test_remote_answer_wins_and_cancels_the_open_form(state_dir: Path) -> None:
    shown = anyio.Event()
    form_cancelled = anyio.Event()

    async def slow_host(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        shown.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            form_cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="legacy", elicitation_callback=slow_host) as client,
        api_client(rt) as api,
    ):
        outcome: dict[str, Any] = {}

        async def call() -> None:
            outcome.update(
                sc(await client.call_tool("ask_user", {"question": "Proceed?", "wait_seconds": 30}))
            )

        with anyio.fail_after(10):  # the call returns as soon as web wins, not at the end of its budget
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await shown.wait()
                (pending,) = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
                await api.post(f"/api/requests/{pending['id']}/reply", json={"text": "go"})
        assert outcome["status"] == "answered" and outcome["channel"] == "web" and outcome["answer"] == "go"
        with anyio.fail_after(10):
            await form_cancelled.wait()  # the server withdrew the form it had open


async def test_remote_answer_wins_and_a_late_form_answer_changes_nothing(state_dir: Path) -> None:
    """2026-07-28: the form cannot be withdrawn; its answer arrives after web won and loses."""
    shown = anyio.Event()
    release = anyio.Event()

    async def late_host(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        shown.set()
        await release.wait()
        return accept(answer="stop")

    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="auto", elicitation_callback=late_host) as client,
        api_client(rt) as api,
    ):
        broker = await rt.broker()
        outcome: dict[str, Any] = {}

        async def call() -> None:
            outcome.update(
                sc(await client.call_tool("ask_user", {"question": "Proceed?", "wait_seconds": 30}))
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(10):
                await shown.wait()
            (pending,) = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
            await api.post(f"/api/requests/{pending['id']}/reply", json={"text": "go"})
            release.set()
        assert outcome["status"] == "answered" and outcome["channel"] == "web" and outcome["answer"] == "go"
        replies = await broker.store.replies(outcome["request_id"])
        assert [(r.channel, r.won) for r in replies] == [("web", True), ("elicitation", False)]


async def test_form_is_withdrawn_when_the_budget_runs_out(state_dir: Path) -> None:
    form_cancelled = anyio.Event()

    async def idle_host(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        try:
            await anyio.sleep_forever()
        finally:
            form_cancelled.set()
        raise AssertionError("unreachable")

    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="legacy", elicitation_callback=idle_host) as client,
    ):
        out = sc(await client.call_tool("ask_user", {"question": "Still there?", "wait_seconds": 1}))
        assert out["status"] == "pending"
        with anyio.fail_after(10):
            await form_cancelled.wait()
        broker = await rt.broker()
        request = await broker.get(out["request_id"])
        assert request is not None and request.status == Status.PENDING


# ------------------------------------------------------------------------ 2026-07-28 round trips


async def test_round_trip_state_is_sealed_and_survives_a_restart(state_dir: Path, tmp_path: Path) -> None:
    args = {"question": "Colour?", "choices": ["red", "blue"], "wait_seconds": 5}
    host = Host()  # declares the capability; the test drives the rounds itself
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="auto", elicitation_callback=host) as client,
    ):
        first = await client.session.call_tool("ask_user", args, allow_input_required=True)
    assert isinstance(first, mcp_types.InputRequiredResult)
    assert first.input_requests is not None and list(first.input_requests) == [FORM_KEY]
    state = first.request_state
    assert state is not None and state.startswith("v1.")  # sealed, not our plaintext
    assert "Colour" not in state
    key_file = state_dir / STATE_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    answer = {FORM_KEY: accept(choice="red")}

    # another server with another key refuses the state
    other = tmp_path / "other"
    other.mkdir()
    async with (
        running(other, form_config()) as rt,
        Client(rt.build_mcp(), mode="auto", elicitation_callback=host) as client,
    ):
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.call_tool("ask_user", args, input_responses=answer, request_state=state)

    # the restarted server (same state directory) takes the retry
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="auto", elicitation_callback=host) as client,
    ):
        out = sc(await client.call_tool("ask_user", args, input_responses=answer, request_state=state))
        assert out["status"] == "answered" and out["choice"] == "red" and out["channel"] == "elicitation"
        assert len(await (await rt.broker()).store.list()) == 1
    assert host.shown == []


async def test_state_key_is_created_once_and_kept(state_dir: Path) -> None:
    Runtime(form_config(), state_dir).build_mcp()
    key = (state_dir / STATE_KEY_FILE).read_text()
    (state_dir / STATE_KEY_FILE).chmod(0o644)
    Runtime(form_config(), state_dir).build_mcp()
    assert (state_dir / STATE_KEY_FILE).read_text() == key
    assert stat.S_IMODE((state_dir / STATE_KEY_FILE).stat().st_mode) == 0o600
    assert len(key.strip()) == 64


# ------------------------------------------------------------------------------ the channel itself


def _request(**fields: Any) -> Request:
    base: dict[str, Any] = {"id": "r1", "kind": Kind.QUESTION, "text": "Q?", "created_at": 0.0}
    return Request(**{**base, **fields})


def test_forms_for_each_kind_of_request() -> None:
    free = elicitation.render(_request())
    assert free.schema == {
        "type": "object",
        "properties": {"answer": {"type": "string", "title": "Answer", "minLength": 1}},
        "required": ["answer"],
    }
    both = elicitation.render(_request(choices=["a", "b"], allow_free_text=True, context="Background."))
    assert set(both.schema["properties"]) == {"choice", "answer"} and both.schema["required"] == []
    assert both.message == "Q?\n\nBackground."
    approval = elicitation.render(
        _request(kind=Kind.APPROVAL, text="Drop it", payload={"x": "y" * 3000}, payload_sha256="abc"),
        ["web"],
    )
    assert approval.message.startswith("Approve this action?\nDrop it")
    assert "…" in approval.message and len(approval.message) < 2000
    assert approval.message.endswith("Also sent via web; the first answer counts.")


def test_form_content_becomes_a_reply() -> None:
    question = _request(choices=["a", "b"], allow_free_text=True)
    picked = elicitation.reply_from(question, {"choice": "a", "answer": "because"}, "host", "me")
    assert (picked.choice, picked.comment, picked.text) == ("a", "because", None)
    typed = elicitation.reply_from(question, {"answer": " c "}, "host", "me")
    assert (typed.choice, typed.text) == (None, "c")
    approval = _request(kind=Kind.APPROVAL)
    odd = elicitation.reply_from(approval, {"decision": "maybe"}, "host", "me")
    assert odd.decision is None  # the broker refuses it: an approval needs approve or deny
    ok = elicitation.reply_from(approval, {"decision": "approve", "comment": ""}, "host", "me")
    assert (ok.decision, ok.comment, ok.channel, ok.responder) == ("approve", None, "host", "me")


async def test_notifications_do_not_go_to_the_form(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        out = sc(await client.call_tool("notify_user", {"message": "hi", "channels": ["web", "elicitation"]}))
        assert out["delivered"] == ["web"]
        assert out["failed"] == [
            {
                "channel": "elicitation",
                "error": "the host's form takes questions and approvals, not notifications",
            }
        ]


def test_default_lists_name_every_form_channel() -> None:
    config = parse_config("channels:\n  web: {type: web}\n  host: {type: elicitation}\n")
    assert config.defaults.ask_user.channels == ["web", "host"]
    assert config.defaults.request_approval.channels == ["web", "host"]
    assert config.defaults.notify_user.channels == ["web"]
    written = parse_config(
        "channels:\n  web: {type: web}\n  host: {type: elicitation}\n"
        "defaults:\n  ask_user: {channels: [web]}\n  request_approval: {timeout: 2h}\n"
    )
    assert written.defaults.ask_user.channels == ["web"]
    assert written.defaults.request_approval.channels == ["web", "host"]
    assert written.defaults.request_approval.timeout == 7200
    assert parse_config("channels:\n  web: {type: web}\n").defaults.ask_user.channels == ["web"]


async def test_a_form_the_client_refuses_leaves_the_other_channels(state_dir: Path) -> None:
    async def refusing_host(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ErrorData:
        return mcp_types.ErrorData(code=-32600, message="not now")

    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="legacy", elicitation_callback=refusing_host) as client,
        api_client(rt) as api,
    ):
        failed = events_of(await rt.broker(), "form_failed")
        outcome: dict[str, Any] = {}

        async def call() -> None:
            outcome.update(sc(await client.call_tool("ask_user", {"question": "Name?", "wait_seconds": 30})))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await failed.wait()
                (pending,) = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
                await api.post(f"/api/requests/{pending['id']}/reply", json={"text": "Sam"})
        assert outcome["status"] == "answered" and outcome["channel"] == "web"


# --------------------------------------------------------------------------- over a real process


@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_form_over_stdio_in_both_eras(tmp_path: Path, state_dir: Path, mode: str, era: str) -> None:
    config = write_config(tmp_path / "hitl.yaml", free_port())
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    host = Host(accept(decision="approve"), accept(answer="Sam"))
    async with Client(params, mode=mode, elicitation_callback=host, read_timeout_seconds=60) as client:
        assert client.session.protocol_version == era
        approval = sc(await client.call_tool("request_approval", {"action": "Restart", "wait_seconds": 30}))
        assert approval["status"] == "answered" and approval["approved"] is True
        assert approval["channel"] == "elicitation" and approval["responder"] == "host form (mcp)"
        question = sc(await client.call_tool("ask_user", {"question": "Who?", "wait_seconds": 30}))
        assert question["answer"] == "Sam" and question["channel"] == "elicitation"
    assert len(host.shown) == 2
    assert stat.S_IMODE((state_dir / STATE_KEY_FILE).stat().st_mode) == 0o600


# ------------------------------------------------------------------------------------- URL mode


INBOX = "http://127.0.0.1"


def url_config() -> Config:
    return parse_config(
        f"""
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web, token: {TOKEN}}}
  elicitation: {{type: elicitation, mode: url}}
""",
        source="test.yaml",
    )


@contextlib.asynccontextmanager
async def browser(rt: Runtime, signed_in: bool = True) -> AsyncIterator[httpx2.AsyncClient]:
    """A browser (cookies, no bearer token), signed in to the inbox through its login link or not."""
    transport = httpx2.ASGITransport(app=rt.http_app(None, "stdio", "127.0.0.1"))
    async with httpx2.AsyncClient(transport=transport, base_url=INBOX) as client:
        if signed_in:
            assert (await client.get("/login", params={"token": TOKEN})).status_code == 303
        yield client


def csrf_of(page: str) -> str:
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert match, "the page carries no CSRF token"
    return match.group(1)


class LinkHost:
    """A host that shows the URL it is given and says the person opened it (or declined)."""

    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.shown: list[mcp_types.ElicitRequestURLParams] = []
        self.seen = anyio.Event()
        self.completed: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestURLParams)
        self.shown.append(params)
        self.seen.set()
        return mcp_types.ElicitResult(action="accept" if self.accept else "decline")

    async def notified(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, mcp_types.ElicitCompleteNotification):
            self.completed.append(root.params.elicitation_id)


async def answer_in_browser(rt: Runtime, url: str, answer: dict[str, str]) -> str:
    """Open the link in the person's (signed-in) browser, answer on the page it leads to; returns it."""
    async with browser(rt) as web:
        opened = await web.get(url)
        assert opened.status_code == 303, opened.text
        page = await web.get(opened.headers["location"])
        assert page.status_code == 200
        sent = await web.post(
            opened.headers["location"] + "/answer", data={**answer, "csrf": csrf_of(page.text)}
        )
        assert sent.status_code == 303, sent.text
        return page.text


@pytest.mark.parametrize("mode", MODES)
async def test_url_mode_link_opens_the_request_page_and_the_answer_there_wins(
    state_dir: Path, mode: str
) -> None:
    host = LinkHost()
    out: dict[str, Any] = {}
    async with running(state_dir, url_config()) as rt:
        rt.inbox_url = INBOX
        async with Client(
            rt.build_mcp(), mode=mode, elicitation_callback=host, message_handler=host.notified
        ) as client:

            async def call() -> None:
                args = {"action": "Drop the staging database", "wait_seconds": 30}
                out.update(sc(await client.call_tool("request_approval", args)))

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await host.seen.wait()
                    (shown,) = host.shown
                    page = await answer_in_browser(
                        rt, shown.url, {"decision": "deny", "comment": "not today"}
                    )
        assert out["status"] == "answered" and out["approved"] is False
        assert (out["channel"], out["responder"], out["comment"]) == ("web", "operator", "not today")
        assert shown.url.startswith(f"{INBOX}/link/") and "Drop the staging database" in shown.message
        assert "Drop the staging database" in page
        broker = await rt.broker()
        audit = [row.event for row in await broker.store.audit(out["request_id"])]
        assert audit.index("link_offered") < audit.index("link_opened") < audit.index("answered")
        assert "link_accepted" in audit
        if mode == "legacy":
            assert host.completed == [shown.elicitation_id]  # the host may stop waiting for the browser

        async with browser(rt) as web:
            again = await web.get(shown.url)
            assert again.status_code == 409 and "already" in again.text  # single use


async def test_a_link_is_not_a_credential(state_dir: Path) -> None:
    """Whoever has the link (the client, the model behind it) cannot answer with it: opening it
    without an inbox session asks to sign in and spends nothing; signed in, it opens once."""
    async with running(state_dir, url_config()) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate the keys", channels=["web"]))
        token = RequestLinks(rt.auth).issue(request.id, "elicitation", "host user (x)", now() + 60)
        async with browser(rt, signed_in=False) as agent:
            opened = await agent.get(f"/link/{token}")
            assert opened.status_code == 401  # no session: only the sign-in form's own nonce cookie
            assert [name for name in agent.cookies if not name.startswith("hitl_signin")] == []
            assert f'name="next" value="/link/{token}"' in opened.text  # sign in, then it opens
            page = await agent.get(f"/requests/{request.id}")
            assert page.status_code == 401
            forged = await agent.post(
                f"/requests/{request.id}/answer", data={"decision": "approve", "csrf": "x"}
            )
            assert forged.status_code == 401
        assert (await broker.get_or_raise(request.id)).is_open
        events = [row.event for row in await broker.store.audit(request.id)]
        assert "link_opened" not in events
        async with browser(rt) as person:
            signed = await person.get("/login", params={"token": TOKEN, "next": f"/link/{token}"})
            assert signed.status_code == 303 and signed.headers["location"] == f"/link/{token}"
            opened = await person.get(f"/link/{token}")
            assert opened.status_code == 303 and opened.headers["location"] == f"/requests/{request.id}"
            again = await person.get(f"/link/{token}")
            assert again.status_code == 409


async def test_a_link_from_another_site_reloads_from_our_origin_and_spends_nothing(state_dir: Path) -> None:
    """A cross-site click carries no SameSite=Strict cookie: the answer is a page that loads the link
    again from our origin (where a signed-in browser's cookie is sent), not a sign-in form."""
    async with running(state_dir, url_config()) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate the keys", channels=["web"]))
        token = RequestLinks(rt.auth).issue(request.id, "elicitation", "host user (x)", now() + 60)
        async with browser(rt, signed_in=False) as agent:
            cross = await agent.get(f"/link/{token}", headers={"Sec-Fetch-Site": "cross-site"})
            assert cross.status_code == 200
            assert f'<meta http-equiv="refresh" content="0;url=/link/{token}">' in cross.text
            assert cross.headers["content-security-policy"].startswith("default-src 'self'")
            same = await agent.get(f"/link/{token}", headers={"Sec-Fetch-Site": "same-origin"})
            assert same.status_code == 401  # still signed out on our own origin: sign in
        assert "link_opened" not in [row.event for row in await broker.store.audit(request.id)]


@pytest.mark.parametrize("mode", MODES)
async def test_an_opened_link_is_not_offered_again(state_dir: Path, mode: str) -> None:
    host = LinkHost()
    async with running(state_dir, url_config()) as rt:
        rt.inbox_url = INBOX
        async with Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client:
            first = sc(await client.call_tool("ask_user", {"question": "Which region?", "wait_seconds": 0.5}))
            assert first["status"] == "pending" and len(host.shown) == 1
            later = sc(
                await client.call_tool(
                    "wait_for_response", {"request_id": first["request_id"], "wait_seconds": 0.5}
                )
            )
            assert later["status"] == "pending"
        assert len(host.shown) == 1  # the person is on the page already: no second prompt


async def test_forged_expired_and_unknown_links_are_refused(state_dir: Path) -> None:
    async with running(state_dir, url_config()) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(_spec("Ship it?"))
        links = RequestLinks(rt.auth)
        good = links.issue(request.id, "elicitation", "host user", now() + 60)
        payload, _, sig = good.rpartition(".")
        tampered = payload.replace(request.id, "0" * len(request.id)) + "." + sig
        other_key = RequestLinks(WebAuth("another-token", "test")).issue(
            request.id, "elicitation", "x", now() + 60
        )
        expired = links.issue(request.id, "elicitation", "host user", now() - 1)
        unknown = links.issue("ffffffffffffffff", "elicitation", "host user", now() + 60)
        async with browser(rt) as web:  # signed in: what is left to refuse is the link itself
            for token, status in [
                (tampered, 404),
                (other_key, 404),
                ("garbage", 404),
                (expired, 410),
                (unknown, 404),
            ]:
                got = await web.get(f"/link/{token}")
                assert got.status_code == status, (token, got.status_code)
                assert "location" not in got.headers
        assert [r.event for r in await broker.store.audit(request.id)].count("link_opened") == 0


@pytest.mark.parametrize("mode", MODES)
async def test_declined_link_as_only_channel_settles_the_request(state_dir: Path, mode: str) -> None:
    async with running(state_dir, url_config()) as rt:
        rt.inbox_url = INBOX
        host = LinkHost(accept=False)
        async with Client(rt.build_mcp(), mode=mode, elicitation_callback=host) as client:
            out = sc(
                await client.call_tool(
                    "request_approval",
                    {"action": "Reboot", "channels": ["elicitation"], "wait_seconds": 30},
                )
            )
        assert out["status"] == "cancelled" and out["approved"] is False
        audit = [row.event for row in await (await rt.broker()).store.audit(out["request_id"])]
        assert "link_declined" in audit


async def test_url_mode_without_an_inbox_address_is_skipped(state_dir: Path) -> None:
    async with running(state_dir, url_config()) as rt:
        host = LinkHost()
        async with Client(rt.build_mcp(), mode="legacy", elicitation_callback=host) as client:
            out = sc(
                await client.call_tool(
                    "ask_user", {"question": "Now?", "channels": ["elicitation"], "wait_seconds": 30}
                )
            )
        assert out["status"] == "pending" and out["next_step"].startswith("Nobody was reached")
        assert "no address to link to" in out["next_step"] and host.shown == []


def _spec(text: str) -> AskSpec:
    return AskSpec(kind=Kind.QUESTION, text=text, channels=["web"])
