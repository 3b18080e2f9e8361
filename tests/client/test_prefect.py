"""Prefect both ways, against a real ``prefect server start`` (SQLite) and a real hitl-mcp server with
Slack (the stand-in) and a ``prefect`` channel: the examples run exactly as docs/integrations/prefect.md
prints them, a person answers on Slack or in the inbox, and the flow runs' states are read through
Prefect's API. Each test prints its figures (ask -> person notified, answer -> flow continued)."""

from __future__ import annotations

import contextlib
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
