"""A throwaway PostgreSQL cluster for the tests, and a fresh database in it for each test.

``postgres_cluster`` (session): ``initdb`` in a temp dir, listening on 127.0.0.1 at a free port with
trust auth, stopped (``pg_ctl stop -m immediate``) at the end; as root, the cluster runs as ``nobody``
(PostgreSQL refuses root). Under pytest-xdist each worker has a cluster of its own: its temp dir is
named after the worker (``hitl-pg-gw1-...``) and its port comes from the worker's block
(``tests.conftest.free_port``). ``$HITL_TEST_POSTGRES_URL`` (an admin URL) is used instead when set.
``postgres_url`` (function): a database of its own for the test, dropped after it. ``opened``: a
``PostgresStore`` on such a database, open.

Without PostgreSQL binaries the tests skip, and fail in CI (``$CI`` set), which installs them.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import pytest

if TYPE_CHECKING:  # asyncpg is imported by the tests that use PostgreSQL, not by every test
    from hitl_mcp.store.postgres import PostgresStore


def pg_bin(name: str) -> str | None:
    """``initdb``/``pg_ctl``: on PATH, else in Debian's /usr/lib/postgresql/<version>/bin (newest)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    return candidates[-1] if candidates else None


@dataclass
class Cluster:
    admin_url: str
    """A superuser URL to the ``postgres`` database."""

    def database_url(self, name: str) -> str:
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path=f"/{name}"))

    async def create_database(self) -> str:
        """A fresh, empty database; its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        await self.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    async def drop_database(self, url: str) -> None:
        """Drop it, with whatever is still connected to it."""
        name = urlsplit(url).path.lstrip("/")
        await self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def execute(self, sql: str, *args: object) -> str:
        import asyncpg

        conn = await asyncpg.connect(self.admin_url)
        try:
            return str(await conn.execute(sql, *args))
        finally:
            await conn.close()

    async def terminate(self, database: str, application_name: str) -> int:
        """End the backends on ``database`` whose application_name is this (a fault for the tests)."""
        import asyncpg

        conn = await asyncpg.connect(self.admin_url)
        try:
            rows = await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name = $2 AND pid <> pg_backend_pid()",
                database,
                application_name,
            )
            return len(rows)
        finally:
            await conn.close()


def _run(argv: list[str], as_nobody: bool) -> None:
    if as_nobody:
        argv = ["runuser", "-u", "nobody", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout.strip()}")


def _start_cluster(root: Path) -> tuple[str, Path, bool]:
    """initdb + pg_ctl start in ``root``; the admin URL, the data dir and whether it runs as nobody."""
    from tests.conftest import free_port

    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    assert initdb and pg_ctl
    as_nobody = os.geteuid() == 0
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if as_nobody:
        shutil.chown(root, "nobody")
        shutil.chown(sockets, "nobody")
    _run([initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"], as_nobody)
    port = free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=200"
    _run([pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"], as_nobody)
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", data, as_nobody


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    url = os.environ.get("HITL_TEST_POSTGRES_URL")
    if url:
        yield Cluster(url)
        return
    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        missing = "PostgreSQL is not installed (apt-get install postgresql); these tests always run in CI"
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    from tests.conftest import worker_index

    root = Path(tempfile.mkdtemp(prefix=f"hitl-pg-gw{worker_index()}-"))
    try:
        admin, data, as_nobody = _start_cluster(root)
        try:
            yield Cluster(admin)
        finally:
            pg_ctl = pg_bin("pg_ctl")
            assert pg_ctl
            _run([pg_ctl, "-D", str(data), "-m", "immediate", "stop"], as_nobody)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def postgres_url(postgres_cluster: Cluster) -> AsyncIterator[str]:
    """A fresh, empty database for this test (dropped after it, with whatever is still connected)."""
    url = await postgres_cluster.create_database()
    try:
        yield url
    finally:
        await postgres_cluster.drop_database(url)


async def opened(url: str, **options: Any) -> PostgresStore:
    """A ``PostgresStore`` on ``url`` (``options``: its keyword arguments), open; close it after."""
    from hitl_mcp.store.postgres import PostgresStore

    store = PostgresStore(url, **options)
    await store.open()
    return store
