"""``hitl_mcp.client`` against a real ``hitl-mcp serve``: over streamable HTTP with an agent token
(``hitl-mcp agent add``) and over a stdio server it spawns, answered through the inbox's API."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hitl_mcp.client import AsyncHitl, Hitl, HitlError, Unreachable
from tests.conftest import PYTHON, ROOT, free_port, server_env
from tests.support.hitl_http import HitlServer, hitl_server, write_hitl_config

pytestmark = pytest.mark.anyio


async def test_ask_waits_through_pending_until_the_person_answers(tmp_path: Path) -> None:
    async with hitl_server(tmp_path) as server:
        # each wait_for_response at most half a second: the answer comes several steps later
        hitl = AsyncHitl(server.url, token=server.token, step_seconds=0.5)
        answer = None

        async def ask() -> None:
            nonlocal answer
            answer = await hitl.ask_user("Which table?", choices=["orders", "orders_v2"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            request = await server.pending()
            await server.first(lambda _: True)  # a step or more goes by before the person answers
            await server.reply(request["id"], choice="orders_v2")
        assert answer is not None and answer.settled
        assert (answer.status, answer.answer, answer.choice, answer.request_id) == (
            "answered",
            "orders_v2",
            "orders_v2",
            request["id"],
        )
        assert answer.responder and answer.channel == "web"
        shown = await server.request(request["id"])
        assert shown["owner"] == "agent:flow-bot"  # the agent token's principal, not a declared name


async def test_the_same_key_re_attaches_so_the_person_is_asked_once(tmp_path: Path) -> None:
    async with hitl_server(tmp_path) as server:
        first = await AsyncHitl(server.url, token=server.token).ask_user(
            "Ship v3?", idempotency_key="deploy-v3", wait=0
        )
        assert first.status == "pending" and not first.settled
        # a retried task, a restarted program: another client, another session, the same key
        again = await AsyncHitl(server.url, token=server.token).ask_user(
            "Ship v3?", idempotency_key="deploy-v3", wait=0
        )
        assert again.request_id == first.request_id and again.status == "pending"
        await server.reply(first.request_id, text="yes")
        after = await AsyncHitl(server.url, token=server.token).ask_user(
            "Ship v3?", idempotency_key="deploy-v3", wait=5
        )
        assert (after.request_id, after.status, after.answer) == (first.request_id, "answered", "yes")
        assert len(await server.requests()) == 1
        # the key is the ask's: reusing it for another question is refused, in one line
        with pytest.raises(HitlError, match="idempotency_key already used"):
            await AsyncHitl(server.url, token=server.token).ask_user(
                "Ship v4?", idempotency_key="deploy-v3", wait=0
            )


async def test_a_deadline_returns_pending_and_wait_for_response_picks_it_up(tmp_path: Path) -> None:
    async with hitl_server(tmp_path) as server, AsyncHitl(server.url, token=server.token) as hitl:
        started = anyio.current_time()
        answer = await hitl.request_approval("Drop table tmp_orders", payload={"sql": "DROP TABLE x"}, wait=1)
        assert answer.status == "pending" and answer.approved is None
        assert 1 <= anyio.current_time() - started < 10
        await server.reply(answer.request_id, decision="approve")
        decided = await hitl.wait_for_response(answer.request_id, wait=10)
        assert (decided.status, decided.approved, decided.payload_sha256) == (
            "answered",
            True,
            answer.raw.get("payload_sha256") or decided.payload_sha256,
        )
        notified = await hitl.notify_user("Dropped tmp_orders", level="success")
        assert notified.delivered == ["web"] and notified.failed == []


async def test_the_blocking_client_from_plain_code(tmp_path: Path) -> None:
    async with hitl_server(tmp_path) as server:

        def program() -> tuple[str, bool | None, str]:
            with Hitl(server.url, token=server.token) as hitl:
                first = hitl.request_approval("Restart the worker", risk="low", idempotency_key="restart-1")
                notified = hitl.notify_user("Restarting the worker")
            return first.status, first.approved, notified.delivered[0]

        async with anyio.create_task_group() as tg:
            result: list[tuple[str, bool | None, str]] = []

            async def run() -> None:
                result.append(await anyio.to_thread.run_sync(program))

            tg.start_soon(run)
            request = await server.pending()
            await server.reply(request["id"], decision="deny", comment="not now")
        assert result == [("answered", False, "web")]


@pytest.mark.process  # the client spawns it, from src/: the scan does not follow there
async def test_a_spawned_stdio_server_and_a_restart_of_the_program(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    port = free_port()
    config = write_hitl_config(tmp_path / "hitl.yaml", port)
    command = [PYTHON, "-m", "hitl_mcp", "serve", "--config", str(config)]
    env = server_env(state_dir)
    with open(tmp_path / "stdio.stderr", "w") as errlog:
        first = await AsyncHitl.spawn(
            command, env=env, cwd=ROOT, errlog=errlog, client_name="nightly"
        ).ask_user("Rerun the backfill?", idempotency_key="backfill-2026-12-01", wait=0)
        assert first.status == "pending"
        # the program stopped (its stdio server with it); the person answers in the inbox meanwhile,
        # which the next stdio server serves beside it
        again = AsyncHitl.spawn(command, env=env, cwd=ROOT, errlog=errlog, client_name="nightly")
        async with again:
            inbox = HitlServer(f"http://127.0.0.1:{port}", "", state_dir, config)
            await inbox.first(lambda rs: rs)
            await inbox.reply(first.request_id, text="from the 1st")
            answer = await again.ask_user("Rerun the backfill?", idempotency_key="backfill-2026-12-01")
    assert (answer.request_id, answer.status, answer.answer) == (first.request_id, "answered", "from the 1st")


async def test_what_goes_wrong_is_one_line(tmp_path: Path) -> None:
    async with hitl_server(tmp_path) as server:
        hitl = AsyncHitl(server.url, token=server.token)
        with pytest.raises(HitlError, match=r"^Error executing tool ask_user: unknown channel 'sms'"):
            await hitl.ask_user("Which table?", channels=["sms"])
        with pytest.raises(HitlError, match=r"refused the credential \(HTTP 401\).*hitl-mcp agent add"):
            await AsyncHitl(server.url, token="not-a-token").ask_user("Which table?")
        with pytest.raises(ValueError, match="wait"):
            await hitl.ask_user("Which table?", wait=-1)
    with pytest.raises(Unreachable, match=r"cannot reach hitl-mcp at http://127\.0\.0\.1:\d+/mcp"):
        await AsyncHitl(server.url, token=server.token, reconnect_seconds=0.5).ask_user("Which table?")


async def test_the_client_rides_out_a_restart_of_the_server(tmp_path: Path) -> None:
    """The server stops while the client waits and comes back on the same port: the client opens
    another session and waits on the same request, which the person answered meanwhile."""
    async with hitl_server(tmp_path) as server:
        port, token = server.url.rsplit(":", 1)[1], server.token
        hitl = AsyncHitl(server.url, token=token, step_seconds=1)
        answers = []

        async def ask() -> None:
            async with hitl:
                answers.append(await hitl.ask_user("Which table?", idempotency_key="table-1"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            request = await server.pending()
            assert server.process is not None
            server.process.process.terminate()
            await server.process.process.wait()
            async with hitl_server(tmp_path, port=int(port), token=token) as again:
                await again.reply(request["id"], text="orders")
                with anyio.fail_after(30):
                    while not answers:
                        await again.first(lambda _: True)
    assert [(a.request_id, a.status, a.answer) for a in answers] == [(request["id"], "answered", "orders")]
