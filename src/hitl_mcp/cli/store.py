"""The store's verbs: ``hitl-mcp migrate`` (either engine), and the database line of ``hitl-mcp check``."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from hitl_mcp.cli.requests import CliError
from hitl_mcp.cli.requests import config_and_state as _config

if TYPE_CHECKING:
    from hitl_mcp.config import Config


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply the pending schema migrations; say the version, and from which it came."""
    from hitl_mcp.core.store import StoreError
    from hitl_mcp.store.select import database_url, where

    config, state_dir = _config(args)
    try:
        url = database_url(config.server.store)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    name = where(config.server.store, state_dir)
    if url is None:
        before, after = _migrate_sqlite(config, state_dir)
    else:
        before, after = anyio.run(_migrate_postgres, url, config.server.store_pool)
    state = "up to date" if before == after else f"migrated from {before}"
    print(f"database at {name}: version {after} ({state})")
    return 0


def _migrate_sqlite(config: Config, state_dir: Path) -> tuple[int, int]:
    from hitl_mcp.store.health import storage_error
    from hitl_mcp.store.select import DB_FILE
    from hitl_mcp.store.sqlite import MIGRATIONS, SqliteStore

    path = state_dir / DB_FILE
    try:
        before = 0
        if path.exists():
            db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
            try:
                before = int(db.execute("PRAGMA user_version").fetchone()[0])
            finally:
                db.close()
        store = SqliteStore(path)

        async def go() -> None:
            try:
                await store.open()
            finally:
                await store.close()

        anyio.run(go)
    except RuntimeError as exc:  # newer than this hitl-mcp
        raise CliError(str(exc)) from None
    except (OSError, sqlite3.Error) as exc:
        raise CliError(storage_error(exc, path)) from None
    return before, len(MIGRATIONS)


async def _migrate_postgres(url: str, pool_size: int) -> tuple[int, int]:
    from hitl_mcp.core.store import StoreError
    from hitl_mcp.store.pg_schema import MIGRATIONS
    from hitl_mcp.store.select import NEEDS_ASYNCPG

    try:
        from hitl_mcp.store.postgres import PostgresStore
    except ImportError:
        raise CliError(NEEDS_ASYNCPG) from None
    store = PostgresStore(url, pool_size=min(pool_size, 2), listen=False)
    try:
        await store.open()
    except StoreError as exc:
        raise CliError(str(exc)) from None
    finally:
        await store.close()
    return store.migrated_from or 0, len(MIGRATIONS)


def check_store(config: Config, state_dir: Path) -> int | None:
    """For ``hitl-mcp check``: can the PostgreSQL store be reached, at which schema version? 1 when
    not; None when the store is SQLite (checked as a file)."""
    from hitl_mcp.core.store import StoreError
    from hitl_mcp.kit.net import redact
    from hitl_mcp.store.select import database_url

    try:
        url = database_url(config.server.store)
    except StoreError as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 1
    if url is None:
        return None
    try:
        from hitl_mcp.store.pg_schema import MIGRATIONS
        from hitl_mcp.store.postgres import probe
    except ImportError:
        print(
            "hitl-mcp: the PostgreSQL store needs asyncpg: pip install 'mcp-hitl[postgres]'", file=sys.stderr
        )
        return 1
    try:
        version = anyio.run(probe, url)
    except StoreError as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 1
    known = len(MIGRATIONS)
    if version > known:
        print(
            f"hitl-mcp: the database at {redact(url)} has schema version {version}, newer than this "
            f"hitl-mcp knows ({known}); upgrade hitl-mcp",
            file=sys.stderr,
        )
        return 1
    pending = "up to date" if version == known else f"hitl-mcp migrate would take it to {known}"
    print(f"# database {redact(url)}: reachable, schema version {version} ({pending})")
    return 0
