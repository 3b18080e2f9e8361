"""Which store engine runs, from plain values (``runtime.engine_of`` reads them from the config), and
how to name its database without its password.

``$HITL_DATABASE_URL``, when set, wins: a ``postgresql://`` (or ``postgres://``) URL selects
PostgreSQL. Else the ``store`` setting (``server.store``): ``sqlite`` (the default, the embedded
database in the state directory) or a PostgreSQL URL. asyncpg is imported only when PostgreSQL is
selected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from hitl_mcp.kit.net import redact

if TYPE_CHECKING:
    from hitl_mcp.core.store import Engine
    from hitl_mcp.store.anchor import Anchorer
    from hitl_mcp.store.seal import Sealer

#: the embedded database's file in the state directory
DB_FILE = "hitl.sqlite3"

ENV = "HITL_DATABASE_URL"
SCHEMES = ("postgresql", "postgres")
NEEDS_ASYNCPG = "the PostgreSQL store needs asyncpg, which is not installed: pip install 'mcp-hitl[postgres]'"


def database_url(store: str, env: dict[str, str] | None = None) -> str | None:
    """The PostgreSQL URL the ``store`` setting (and the environment) run on; None for SQLite."""
    raw = (os.environ if env is None else env).get(ENV, "").strip()
    if raw:
        try:
            scheme = urlsplit(raw).scheme
        except ValueError:
            scheme = ""
        if scheme not in SCHEMES:
            from hitl_mcp.core.records import StoreError  # here: the server's start imports this module

            raise StoreError(f"${ENV} must be a postgresql:// URL")  # not echoed: it may hold a password
        return raw
    return None if store == "sqlite" else store


def where(store: str, state_dir: Path) -> str:
    """The database, as said to people: a path, or the URL without its password."""
    url = database_url(store)
    return redact(url) if url else str(state_dir / DB_FILE)


def engine_for(
    store: str,
    state_dir: Path,
    *,
    pool_size: int = 10,
    anchor: Anchorer | None = None,
    serving: bool = True,
    sealer: Sealer | None = None,
) -> Engine:
    """The store the ``store`` setting names (not yet opened), with its ``anchor``. Raises
    ``StoreError`` with one line when PostgreSQL is configured and asyncpg is missing. ``serving``
    false (a one-shot CLI command): PostgreSQL opens no LISTEN connection, since nothing waits for
    other processes' changes."""
    url = database_url(store)
    if url is None:
        from hitl_mcp.store.sqlite import SqliteStore

        return SqliteStore(state_dir / DB_FILE, anchor, sealer)
    try:
        from hitl_mcp.store.postgres import PostgresStore
    except ImportError as exc:
        if exc.name and exc.name.startswith("asyncpg"):
            from hitl_mcp.core.records import StoreError

            raise StoreError(NEEDS_ASYNCPG) from None
        raise
    return PostgresStore(url, anchor, pool_size=pool_size, listen=serving, sealer=sealer)


def failure(engine: Engine, exc: BaseException) -> str:
    """Why opening ``engine`` failed, on one line, naming its database."""
    from hitl_mcp.store.sqlite import SqliteStore

    if isinstance(engine, SqliteStore):
        return f"the database {engine.path} failed: {exc}"
    return str(exc)  # the PostgreSQL engine's errors name the (redacted) database already
