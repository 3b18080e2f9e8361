"""What only the PostgreSQL store does: LISTEN wake-ups and their recovery, leases that die with their
connection, a pool that survives cut connections, a password that is never said, and replicas serving
one database; and ``hitl-mcp migrate`` on both engines."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client

from hitl_mcp.core.store import StoreError
from hitl_mcp.store.pg_schema import MIGRATIONS
from hitl_mcp.store.postgres import NewerDatabase, PostgresStore
from tests.conftest import TOKEN, bearer, cli, free_port, sc, serve_args, server_env, server_process
from tests.support.postgres import Cluster, opened
from tests.support.settle import verify_audit

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pair(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two replicas would have."""
    a, b = await opened(postgres_url), await opened(postgres_url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def eventually(check: Callable[[], Any], seconds: float = 10) -> Any:
    """``check()``'s value once truthy. For what only PostgreSQL's own processes decide (a backend
    exiting, the listener's reconnect): nothing here can be awaited, so it looks every 20 ms."""
    with anyio.fail_after(seconds):
        while True:
            value = check()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return value
            await anyio.sleep(0.02)


async def test_a_change_committed_by_another_replica_wakes_changed(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = pair
    with anyio.fail_after(1):
        await a.changed()  # the wake-up of the listener's first connect
    for n in range(3):
        seq = await a.last_seq()
        async with anyio.create_task_group() as tg:
            woken = anyio.Event()

            async def wait(woken: anyio.Event = woken) -> None:
                await a.changed()
                woken.set()

            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert not woken.is_set()
            await b.record(None, "login", "owner", {"n": n})
            with anyio.fail_after(5):  # far below the 30 s fallback poll: the notification did it
                await woken.wait()
        assert [c.event for c in await a.changes_since(seq)] == ["login"]


async def test_a_dropped_listener_is_reported_and_recovers_without_losing_a_change(
    pair: tuple[PostgresStore, PostgresStore], postgres_url: str, postgres_cluster: Cluster
) -> None:
    a, b = pair
    with anyio.fail_after(1):
        await a.changed()
    assert a.listener_problem() is None
    seq = await a.last_seq()
    assert await postgres_cluster.terminate(dbname(postgres_url), "hitl-mcp listener") == 2  # a's and b's
    problem = await eventually(a.listener_problem)
    assert "change listener" in problem and "postgres@" in problem
    await b.record(None, "login", "owner", {})  # while a cannot hear it
    with anyio.fail_after(15):
        await a.changed()  # the reconnect wakes it: notifications while away are lost
    await eventually(lambda: a.listener_problem() is None)
    assert [c.event for c in await a.changes_since(seq)] == ["login"]


async def test_work_survives_its_pooled_connections_being_cut(
    pair: tuple[PostgresStore, PostgresStore], postgres_url: str, postgres_cluster: Cluster
) -> None:
    """A server restart or a failover cuts every pooled connection: the next unit of work is tried
    again on a fresh one instead of failing."""
    a, _ = pair
    await a.record(None, "login", "owner", {})
    assert await postgres_cluster.terminate(dbname(postgres_url), "hitl-mcp") >= 2  # both pools
    await a.record(None, "logout", "owner", {})
    assert [c.event for c in await a.changes_since({})] == ["login", "logout"]
    assert (await verify_audit(a)).ok


async def test_a_lease_ends_when_its_holders_connection_dies(
    pair: tuple[PostgresStore, PostgresStore], postgres_url: str, postgres_cluster: Cluster
) -> None:
    a, b = pair
    held = await a.try_lease("poller:telegram")
    assert held is not None and await held.alive()
    assert await b.try_lease("poller:telegram") is None
    killed = await postgres_cluster.terminate(dbname(postgres_url), "hitl-mcp lease poller:telegram")
    assert killed == 1
    taken = await eventually(lambda: b.try_lease("poller:telegram"))
    assert not await held.alive()
    await held.release()  # harmless after the connection died
    await taken.release()


async def test_a_database_newer_than_the_code_is_refused(postgres_url: str) -> None:
    store = await opened(postgres_url)
    await store.close()
    import asyncpg

    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("UPDATE hitl_schema SET version = $1", len(MIGRATIONS) + 1)
    finally:
        await conn.close()
    with pytest.raises(NewerDatabase) as info:
        await opened(postgres_url)
    assert str(info.value).endswith(f"newer than this hitl-mcp knows ({len(MIGRATIONS)}); upgrade hitl-mcp")


async def test_migrate_brings_an_empty_database_up_to_date_and_refuses_a_newer_one(
    postgres_url: str, state_dir: Path
) -> None:
    env = {"HITL_DATABASE_URL": postgres_url}
    code, out, err = await cli(state_dir, "migrate", **env)
    assert (code, out, err) == (
        0,
        f"database at {postgres_url}: version {len(MIGRATIONS)} (migrated from 0)\n",
        "",
    )
    code, out, _ = await cli(state_dir, "migrate", **env)
    assert (code, out) == (0, f"database at {postgres_url}: version {len(MIGRATIONS)} (up to date)\n")
    code, out, _ = await cli(state_dir, "check", **env)
    assert code == 0
    assert f"# database {postgres_url}: reachable, schema version {len(MIGRATIONS)} (up to date)" in out
    import asyncpg

    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("UPDATE hitl_schema SET version = 99")
    finally:
        await conn.close()
    code, out, err = await cli(state_dir, "migrate", **env)
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"hitl-mcp: the database at {postgres_url} has schema version 99, newer than this hitl-mcp "
        f"knows ({len(MIGRATIONS)}); upgrade hitl-mcp"
    )
    code, _, err = await cli(state_dir, "check", **env)
    assert code == 1 and "newer than this hitl-mcp knows" in err


async def test_migrate_on_sqlite(state_dir: Path) -> None:
    from hitl_mcp.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS

    n, path = len(SQLITE_MIGRATIONS), state_dir / "hitl.sqlite3"
    code, out, err = await cli(state_dir, "migrate")
    assert (code, out, err) == (0, f"database at {path}: version {n} (migrated from 0)\n", "")
    code, out, _ = await cli(state_dir, "migrate")
    assert (code, out) == (0, f"database at {path}: version {n} (up to date)\n")
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    code, out, err = await cli(state_dir, "migrate")
    assert (code, out) == (1, "")
    assert err.strip() == (
        f"hitl-mcp: {path} has schema version 99, newer than this hitl-mcp knows ({n}); upgrade hitl-mcp"
    )


async def test_the_password_is_never_said_when_the_database_is_unreachable(state_dir: Path) -> None:
    url = f"postgresql://app:s3cret-pw@127.0.0.1:{free_port()}/hitl"
    with pytest.raises(StoreError) as info:
        await opened(url)
    said = str(info.value)
    assert said.startswith(
        f"cannot use the database at postgresql://app:***@127.0.0.1:{urlsplit(url).port}/hitl: "
    )
    assert "s3cret-pw" not in said
    for verb in ("check", "migrate", "pending"):
        code, out, err = await cli(state_dir, verb, HITL_DATABASE_URL=url)
        assert code != 0, verb
        assert "app:***@127.0.0.1" in err and "s3cret-pw" not in out + err, (verb, err)
    config = state_dir / "hitl.yaml"
    config.write_text(f"server:\n  http: {{host: 127.0.0.1, port: {free_port()}}}\n  store: '{url}'\n")
    code, out, err = await cli(state_dir, "serve", "--config", str(config), "--transport", "http")
    assert code != 0
    assert "cannot keep requests" in err and "app:***@" in err and "s3cret-pw" not in out + err


async def test_two_replicas_on_one_database_answer_each_others_requests(
    tmp_path: Path, postgres_url: str
) -> None:
    """An agent asks on replica A; the person answers through replica B's API; A's blocking call
    returns the answer (B's commit notified A's listener)."""
    ports = free_port(), free_port()
    configs = []
    for name, port in zip("ab", ports, strict=True):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"server:\n  http: {{host: 127.0.0.1, port: {port}}}\n  store: '{postgres_url}'\n"
            "defaults:\n  heartbeat_seconds: 1\n"
        )
        configs.append(path)
    env_a, env_b = server_env(tmp_path / "state-a"), server_env(tmp_path / "state-b")
    async with (
        server_process(serve_args(configs[0], "--transport", "http"), env_a),
        server_process(serve_args(configs[1], "--transport", "http"), env_b),
        Client(bearer(f"http://127.0.0.1:{ports[0]}/mcp"), mode="legacy") as agent,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        out: dict[str, Any] = {}
        asked = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            asked.set()

        async def ask() -> None:
            args = {"question": "Ship it?", "wait_seconds": 30}
            out.update(sc(await agent.call_tool("ask_user", args, progress_callback=on_progress)))

        with anyio.fail_after(25):  # B's answer reaches A long before A's 30 s fallback poll
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                await asked.wait()
                base = f"http://127.0.0.1:{ports[1]}/api/requests"
                (pending,) = (await http.get(base, params={"status": "pending"})).json()["requests"]
                reply = await http.post(f"{base}/{pending['id']}/reply", json={"text": "via B"})
                assert reply.status_code == 200
        assert (out["status"], out["answer"]) == ("answered", "via B")
        health = await http.get(f"http://127.0.0.1:{ports[0]}/healthz")
        assert health.status_code == 200
    store = await opened(postgres_url)
    try:
        assert (await verify_audit(store)).ok
        (request,) = await store.list()
        assert (request.answer, request.channel) == ("via B", "web")
    finally:
        await store.close()
    # the CLI reads the same database; B settled the request, so B's state directory holds the anchor
    code, out, err = await cli(tmp_path / "state-b", "audit", "verify", HITL_DATABASE_URL=postgres_url)
    assert code == 0, err
    assert "1 anchor" in out, out
    code, out, err = await cli(tmp_path / "state-a", "history", HITL_DATABASE_URL=postgres_url)
    assert code == 0 and "Ship it?" in out and "via B" in out, (out, err)


def test_without_asyncpg_the_postgresql_store_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hitl_mcp.config import parse_config
    from hitl_mcp.runtime import engine_of
    from hitl_mcp.store.select import NEEDS_ASYNCPG

    monkeypatch.delitem(sys.modules, "hitl_mcp.store.postgres")
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # as if not installed: importing it fails
    config = parse_config("server:\n  store: postgresql://app:pw@db/hitl\n", source="hitl.yaml", env={})
    with pytest.raises(StoreError) as info:
        engine_of(config, tmp_path)
    assert str(info.value) == NEEDS_ASYNCPG
    assert NEEDS_ASYNCPG.endswith("pip install 'mcp-hitl[postgres]'")
    monkeypatch.setenv("HITL_DATABASE_URL", "mysql://app:pw@db/hitl")
    with pytest.raises(StoreError) as info:
        engine_of(parse_config("", source="hitl.yaml", env={}), tmp_path)
    assert str(info.value) == "$HITL_DATABASE_URL must be a postgresql:// URL"


def test_sqlite_never_loads_asyncpg(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from hitl_mcp.config import parse_config;"
        " from hitl_mcp.runtime import engine_of;"
        " engine_of(parse_config('', source='x', env={}), Path(sys.argv[1]));"
        " print('asyncpg' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


async def test_healthz_answers_503_while_the_listener_is_down_and_200_once_it_is_back(
    tmp_path: Path, postgres_url: str, postgres_cluster: Cluster
) -> None:
    """A replica that would miss other replicas' answers says so, for the balancer to drain it: its
    listener is cut and cannot reconnect (the database takes no new connections), while the pool's
    open connections still answer the store's read."""
    port = free_port()
    config = tmp_path / "a.yaml"
    config.write_text(f"server:\n  http: {{host: 127.0.0.1, port: {port}}}\n  store: '{postgres_url}'\n")
    name = dbname(postgres_url)
    async with (
        server_process(serve_args(config, "--transport", "http"), server_env(tmp_path / "state")),
        httpx2.AsyncClient() as http,
    ):
        health = f"http://127.0.0.1:{port}/healthz"
        assert (await http.get(health)).status_code == 200

        async def status(code: int) -> bool:
            return (await http.get(health)).status_code == code

        await postgres_cluster.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            assert await postgres_cluster.terminate(name, "hitl-mcp listener") == 1
            await eventually(lambda: status(503))
            body = (await http.get(health)).json()
            assert body["status"] == "unavailable" and postgres_url not in str(body)
        finally:
            await postgres_cluster.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await eventually(lambda: status(200), seconds=30)  # the listener's backoff is at most 10 s


async def test_a_create_and_its_resolve_take_fifteen_round_trips(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement is a round trip to the database: a connection going back to the pool sends
    none (asyncpg's default reset sent one per transaction), an audit row goes with its
    notification in one, a request with its deliveries, the locked row with what was asked, and a
    settle's skips, retractions and cancelled steps in one."""
    import asyncpg

    from hitl_mcp.core.models import Kind, Reply, Request, now
    from hitl_mcp.core.outcomes import check_reply, expiry_outcome

    sent: list[str] = []
    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        real = getattr(asyncpg.connection.Connection, name)

        def counted(self: Any, query: str, *args: Any, __real: Any = real, **kwargs: Any) -> Any:
            sent.append(" ".join(query.split()))
            return __real(self, query, *args, **kwargs)

        monkeypatch.setattr(asyncpg.connection.Connection, name, counted)
    store = PostgresStore(postgres_url, listen=False)
    await store.open()
    try:
        asked = Request(id="rt1", kind=Kind.QUESTION, text="Ship?", channels=["web"], created_at=now())
        await store.record(None, "warm", None, {})  # claims this process's audit chain, once per process
        sent.clear()
        created, _ = await store.create(asked, None)
        reply = Reply(channel="web", responder="bench", text="yes")
        settled = await store.resolve(
            created.id, reply, check_reply(created, reply), expiry_outcome(created), frozenset({"web"})
        )
        assert settled is not None and settled.won
    finally:
        await store.close()
    assert not [q for q in sent if "RESET ALL" in q], sent
    assert len(sent) <= 15, "\n".join(sent)
