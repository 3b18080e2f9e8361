"""Is the database file whole? Asked before anything is served, and by ``hitl-mcp check``.

A damaged file (a disk error, a bad copy, pages overwritten) opens without complaint; SQLite notices
only when a query reaches a bad page, which for a server would be after it announced itself. A
quick check (``PRAGMA quick_check``: every page and index structure, not the index contents) reads
the whole file once: a few milliseconds for a typical database, under 0.1 s for 100 MB.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

#: what SQLite calls a damaged file: malformed pages, or not a database at all
DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def is_damage(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in DAMAGE_CODES


def damaged_message(path: Path, reason: str) -> str:
    return (
        f"the database at {path} is damaged: {reason} "
        "(to start afresh, move it aside with its -wal, -shm and audit.anchor files; or restore a copy)"
    )


def database_damage(path: Path) -> str | None:
    """What is wrong with the database at ``path``, on one line; None when it is whole or absent.
    Other errors (the file cannot be opened at all) are raised as they are."""
    if not path.exists():
        return None
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        rows = db.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            return str(exc)
        raise
    finally:
        db.close()
    text = " ".join(str(row[0]) for row in rows if row[0] != "ok")
    problems = [" ".join(p.split()) for p in text.replace("*** in database main ***", "\n").splitlines()]
    problems = [p for p in problems if p]
    if not problems:
        return None
    return problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")


def database_problem(path: Path) -> str | None:
    """One line saying why the database at ``path`` cannot serve (damaged, or not to be opened)."""
    try:
        damage = database_damage(path)
    except (OSError, sqlite3.Error) as exc:
        return storage_error(exc, path)
    return damaged_message(path, damage) if damage else None


def storage_error(exc: BaseException, db: Path | None = None) -> str:
    """One line for a database or state directory that failed, saying which and why."""
    if isinstance(exc, OSError):
        where = exc.filename or db
        return f"cannot use {where}: {exc.strerror or exc}" if where else f"the state directory failed: {exc}"
    if db is None:
        return f"the database failed: {exc}"
    if is_damage(exc):
        return damaged_message(db, str(exc))
    reason = str(exc)
    if db.parent.is_dir() and not os.access(db.parent, os.R_OK | os.X_OK):
        reason += f" (this user cannot read the state directory {db.parent})"
    elif db.parent.is_dir() and not os.access(db.parent, os.W_OK):
        reason += f" (the state directory {db.parent} is read-only)"
    return f"cannot use the database at {db}: {reason}"
