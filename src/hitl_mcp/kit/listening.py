"""Where the servers on a state directory listen: each one that serves HTTP (the inbox, and ``/mcp``
over ``--transport http``) writes its address into ``<state dir>/listening/<pid>.json`` while it runs,
so that the other verbs (``inbox``, ``agent add``, ``answer`` through the API) find the port that
``make run PORT=19001`` or ``--port`` chose, with no ``--port`` of their own.

A file whose process is gone (a server that was killed) is passed over, and removed when found.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

FOLDER = "listening"


@dataclass(frozen=True)
class Listening:
    url: str
    """The address a browser on this machine reaches it at (``http://127.0.0.1:19001``)."""
    transport: str
    """``http`` or ``sse`` (MCP served there too), or ``stdio`` (the inbox beside a host's server)."""
    pid: int


def record(state_dir: Path, url: str, transport: str) -> Path | None:
    """Say where this process listens; the path to ``forget``, or None when it cannot be written (the
    server runs all the same: the other verbs fall back to the config's port)."""
    folder = state_dir / FOLDER
    path = folder / f"{os.getpid()}.json"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        part = path.with_suffix(".part")
        part.write_text(json.dumps({"url": url, "transport": transport, "pid": os.getpid()}))
        part.replace(path)
    except OSError:
        return None
    return path


def forget(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def running(state_dir: Path) -> list[Listening]:
    """The servers on this state directory that are running, newest first."""
    found: list[tuple[float, Listening]] = []
    try:
        paths = list((state_dir / FOLDER).glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = json.loads(path.read_text())
            entry = Listening(str(data["url"]), str(data["transport"]), int(data["pid"]))
            written = path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _alive(entry.pid):
            path.unlink(missing_ok=True)
            continue
        found.append((written, entry))
    return [entry for _, entry in sorted(found, key=lambda item: -item[0])]


def address(state_dir: Path, *, mcp: bool = False) -> str | None:
    """The address of a running server on this state directory (one that serves MCP over HTTP when
    ``mcp``, else any, preferring one that does), or None."""
    servers = running(state_dir)
    serving_mcp = [s for s in servers if s.transport != "stdio"]
    chosen = serving_mcp or ([] if mcp else servers)
    return chosen[0].url if chosen else None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name == "nt":  # os.kill(pid, 0) would end the process there: trust the file
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    except OSError:
        return False
    return True
