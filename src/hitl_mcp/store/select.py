"""Which store engine a config runs on, and how to name its database without its password.

``$HITL_DATABASE_URL``, when set, wins: a ``postgresql://`` (or ``postgres://``) URL selects
PostgreSQL. Else ``server.store``: ``sqlite`` (the default, the embedded database in the state
directory) or a PostgreSQL URL. asyncpg is imported only when PostgreSQL is selected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from hitl_mcp.store.base import StoreError

if TYPE_CHECKING:
    from hitl_mcp.config import Config
    from hitl_mcp.store.base import Engine

ENV = "HITL_DATABASE_URL"
SCHEMES = ("postgresql", "postgres")
NEEDS_ASYNCPG = "the PostgreSQL store needs asyncpg, which is not installed: pip install 'mcp-hitl[postgres]'"


def redact(url: str) -> str:
    """A database URL with its password as ``***`` and without its query (which may hold one)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user = userinfo.partition(":")[0]
            netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "postgresql://***"


def database_url(config: Config, env: dict[str, str] | None = None) -> str | None:
    """The PostgreSQL URL this config runs on; None for SQLite."""
    raw = (os.environ if env is None else env).get(ENV, "").strip()
    if raw:
        try:
            scheme = urlsplit(raw).scheme
        except ValueError:
            scheme = ""
        if scheme not in SCHEMES:
            raise StoreError(f"${ENV} must be a postgresql:// URL")  # not echoed: it may hold a password
        return raw
    return None if config.server.store == "sqlite" else config.server.store


def where(config: Config, state_dir: Path) -> str:
    """The database, as said to people: a path, or the URL without its password."""
    from hitl_mcp.runtime import DB_FILE

    url = database_url(config)
    return redact(url) if url else str(state_dir / DB_FILE)


def engine_for(config: Config, state_dir: Path, *, serving: bool = True) -> Engine:
    """The configured store (not yet opened). Raises ``StoreError`` with one line when PostgreSQL is
    configured and asyncpg is missing. ``serving`` false (a one-shot CLI command): PostgreSQL opens
    no LISTEN connection, since nothing waits for other processes' changes."""
    from hitl_mcp.anchor import configured_anchor
    from hitl_mcp.runtime import DB_FILE

    anchor = configured_anchor(config, state_dir)
    url = database_url(config)
    if url is None:
        from hitl_mcp.store.sqlite import SqliteStore

        return SqliteStore(state_dir / DB_FILE, anchor)
    try:
        from hitl_mcp.store.postgres import PostgresStore
    except ImportError as exc:
        if exc.name and exc.name.startswith("asyncpg"):
            raise StoreError(NEEDS_ASYNCPG) from None
        raise
    return PostgresStore(url, anchor, pool_size=config.server.store_pool, listen=serving)


def failure(engine: Engine, exc: BaseException) -> str:
    """Why opening ``engine`` failed, on one line, naming its database."""
    from hitl_mcp.store.sqlite import SqliteStore

    if isinstance(engine, SqliteStore):
        return f"the database {engine.path} failed: {exc}"
    return str(exc)  # the PostgreSQL engine's errors name the (redacted) database already
