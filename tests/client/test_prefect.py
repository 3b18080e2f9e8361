"""Prefect both ways, against a real ``prefect server start`` (SQLite) and a real hitl-mcp server with
Slack (the stand-in) and a ``prefect`` channel: the examples run exactly as docs/integrations/prefect.md
prints them, a person answers on Slack or in the inbox, and the flow runs' states are read through
Prefect's API. Each test prints its figures (ask -> person notified, answer -> flow continued)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import PYTHON, ROOT
from tests.support.hitl_http import HitlServer, hitl_server
from tests.support.prefect_server import PrefectApi, polled, prefect_env, prefect_server
from tests.support.slack import APP_TOKEN, BOT_TOKEN, CHANNEL, Message, SlackStandin

pytestmark = [pytest.mark.anyio, pytest.mark.process]

SAM = "U0SAM"


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prefect_server(tmp_path_factory.mktemp("prefect")) as api:
        yield api


def channels(slack_url: str, prefect_api: str) -> str:
    return f"""
  slack: {{type: slack, bot_token: {BOT_TOKEN}, app_token: {APP_TOKEN}, channel: {CHANNEL},
           allowed_users: [{SAM}], api_base_url: "{slack_url}"}}
  prefect: {{type: prefect, api_url: "{prefect_api}"}}
"""


def flow_env(tmp_path: Path, prefect_api: str, server: HitlServer) -> dict[str, str]:
    return prefect_env(
        tmp_path / "prefect-home", prefect_api, HITL_URL=server.url, HITL_AGENT_TOKEN=server.token
    )


async def posted(stand: SlackStandin, n: int = 1) -> tuple[Message, float]:
    """The n-th message the bot posted, and when it was seen."""
    await polled(lambda: len([m for m in stand.messages if not m.thread_ts]) >= n)
    return [m for m in stand.messages if not m.thread_ts][n - 1], time.time()


def asked_at(request: dict[str, Any]) -> float:
    return float(request["created_at"]) if isinstance(request["created_at"], int | float) else _iso(request)


def _iso(request: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(request["created_at"]).replace("Z", "+00:00")).timestamp()


def _ts(state: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(state["timestamp"]).replace("Z", "+00:00")).timestamp()


@contextlib.asynccontextmanager
async def program(log: Path, args: list[str], env: dict[str, str]) -> AsyncIterator[anyio.abc.Process]:
    """``python <args>`` from the checkout, its output in ``log``; ended (if it still runs) at the end."""
    with open(log, "w") as out:
        process = await anyio.open_process([PYTHON, *args], env=env, cwd=ROOT, stdout=out, stderr=out)
        try:
            yield process
        finally:
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()


# --------------------------------------------------------------------------------- the tool way


async def test_the_tool_way_a_task_asks_and_gets_the_answer_from_the_inbox(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], prefect_api: str
) -> None:
    stand, slack_url = slack_standin
    prefect = PrefectApi(prefect_api)
    defaults = "  ask_user: {channels: [slack, web]}"
    async with hitl_server(tmp_path, channels(slack_url, prefect_api), defaults=defaults) as server:
        env = flow_env(tmp_path, prefect_api, server)
        async with program(tmp_path / "flow.log", ["examples/prefect_tool.py"], env) as flow:
            message, notified = await posted(stand)
            request = await server.pending()
            await server.reply(request["id"], choice="orders_v2")
            answered = time.time()
            with anyio.fail_after(60):
                await flow.wait()
        assert flow.returncode == 0, (tmp_path / "flow.log").read_text()[-3000:]
        (run,) = await prefect.flow_runs("nightly-load")
        assert run["state"]["type"] == "COMPLETED"
        assert "loading from orders_v2" in "\n".join(await prefect.logs(run["id"]))
        (task_run,) = await prefect.task_runs(run["id"])
        assert task_run["state"]["type"] == "COMPLETED" and task_run["run_count"] == 1
        continued = _ts(task_run["state"])
        # Slack says who answered, in the inbox
        await polled(lambda: message.versions)
        assert "orders_v2" in message.all_text()
        print(
            f"\nprefect tool way: ask -> person notified {notified - asked_at(request):.2f} s;"
            f" answer -> task done {continued - answered:.2f} s"
        )


# --------------------------------------------------------------------------------- the sleeping way


@pytest.mark.parametrize("where", ["slack", "inbox"])
async def test_the_sleeping_way_the_flow_run_is_suspended_then_resumed_with_the_answer(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], prefect_api: str, where: str
) -> None:
    stand, slack_url = slack_standin
    prefect = PrefectApi(prefect_api)
    async with hitl_server(tmp_path, channels(slack_url, prefect_api)) as server:
        env = flow_env(tmp_path, prefect_api, server)
        async with program(tmp_path / "serve.log", ["examples/prefect_sleeping.py"], env) as runner:

            async def deployed() -> dict[str, Any] | None:
                assert runner.returncode is None, (tmp_path / "serve.log").read_text()[-3000:]
                return await prefect.deployment("publish-report/publish-report")

            deployment = await polled(deployed)
            run_id = await prefect.run_deployment(deployment["id"], {"quarter": "2026-Q3"})
            message, notified = await posted(stand)
            request = await server.pending()

            async def suspended() -> dict[str, Any] | None:
                run = await prefect.flow_run(run_id)
                return run if run["state"]["type"] == "PAUSED" else None

            run = await polled(suspended)
            # suspended, not paused: the process that ran it is gone, nothing holds it
            assert run["state"]["name"] == "Suspended"
            assert run["state"]["state_details"]["pause_reschedule"] is True
            assert run["state"]["state_details"]["pause_timeout"] is None  # as long as the request lives

            if where == "slack":
                await stand.push("interactive", stand.click(message, SAM, "approve"))
            else:
                await server.reply(request["id"], decision="approve", comment="numbers check out")
            answered = time.time()

            async def completed() -> dict[str, Any] | None:
                run = await prefect.flow_run(run_id)
                log = (tmp_path / "serve.log").read_text()[-4000:]
                assert run["state"]["type"] not in ("FAILED", "CRASHED"), f"{run['state']}\n{log}"
                return run if run["state"]["type"] == "COMPLETED" else None

            await polled(completed, seconds=90)
            # read before the runner stops: a runner stopped just as a run's process ends may still
            # propose Cancelled for it (Prefect's, not hitl-mcp's)
            states = await prefect.states(run_id)
        logs = "\n".join(await prefect.logs(run_id))
        who = "@sam (U0SAM)" if where == "slack" else "operator"
        assert f"publishing 2026-Q3: approved by {who}" in logs
        kinds = [s["type"] for s in states]
        assert kinds.count("PAUSED") == 1 and kinds[-1] == "COMPLETED", [
            (s["type"], s["name"]) for s in states
        ]
        resumed = next(s for s in states if s["name"] == "Resuming")
        running_again = next(s for s in states[kinds.index("PAUSED") :] if s["type"] == "RUNNING")
        # the run's input is the outcome, as hitl-mcp's prefect channel sent it on settling
        settled = await server.request(request["id"])
        assert settled["status"] == "answered" and settled["outcome"]["approved"] is True
        resumes = [d for d in settled["deliveries"] if d["channel"] == "prefect"]
        assert [(d["action"], d["status"]) for d in resumes] == [("deliver", "sent"), ("retract", "sent")]
        inputs = await prefect.inputs(run_id, f"suspended-hitl-mcp-{request['id']}-1")
        (given,) = [json.loads(v) for k, v in inputs.items() if k.endswith("-response")]
        assert (given["request_id"], given["status"], given["approved"]) == (request["id"], "answered", True)
        assert len(await server.requests()) == 1  # asked once: the run's second start re-attached
        print(
            f"\nprefect sleeping way ({where}): ask -> person notified {notified - asked_at(request):.2f} s;"
            f" answer -> run resumed {_ts(resumed) - answered:.2f} s, running again"
            f" {_ts(running_again) - answered:.2f} s, completed {_ts(states[-1]) - answered:.2f} s"
        )


async def test_a_retried_task_re_attaches_so_the_person_is_asked_once(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], prefect_api: str
) -> None:
    stand, slack_url = slack_standin
    prefect = PrefectApi(prefect_api)
    defaults = "  ask_user: {channels: [slack]}"
    async with hitl_server(tmp_path, channels(slack_url, prefect_api), defaults=defaults) as server:
        env = flow_env(tmp_path, prefect_api, server)
        log = tmp_path / "flow.log"
        async with program(log, ["tests/client/flows/prefect_retry.py"], env) as flow:

            async def second_attempt() -> dict[str, Any] | None:
                runs = await prefect.flow_runs("backfill")
                tasks = await prefect.task_runs(runs[-1]["id"]) if runs else []
                return tasks[0] if tasks and tasks[0]["run_count"] >= 2 else None

            await polled(second_attempt)  # the first attempt asked, failed, and Prefect retried it
            message, _ = await posted(stand)
            await stand.push("interactive", stand.click(message, SAM, "choice:1"))
            with anyio.fail_after(60):
                await flow.wait()
        assert flow.returncode == 0, log.read_text()[-3000:]
        (run,) = await prefect.flow_runs("backfill")
        (task_run,) = await prefect.task_runs(run["id"])
        assert task_run["run_count"] == 2 and task_run["state"]["type"] == "COMPLETED"
        assert "backfilling in us-east" in "\n".join(await prefect.logs(run["id"]))
        assert len(await server.requests()) == 1  # asked once across the retry
        assert len([m for m in stand.messages if not m.thread_ts]) == 1
