"""Is the database file whole? Asked before anything is served, and by ``hitl-mcp check``.

A damaged file (a disk error, a bad copy, pages overwritten) opens without complaint; SQLite notices
only when a query reaches a bad page, which for a server would be after it announced itself. A
quick check (``PRAGMA quick_check``: every page and index structure, not the index contents) reads
the whole file once: a few milliseconds for a typical database, under 0.1 s for 100 MB.
"""

from __future__ import annotations

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
