"""Diffs as a preview keeps them: one entry per file, its hunks as unified-diff text.

``make`` computes a file's diff from its content before and after (``difflib``), ``parse`` reads a
unified diff (``git diff``, ``diff -u``) with ``unidiff``, ``as_text`` writes an entry back as a
unified diff, and ``lines`` reads its hunks into numbered lines for the inbox. No I/O.

An entry: ``{"path", "status": "modified" | "added" | "deleted" | "renamed", "old_path"?,
"diff": "@@ ... hunks", "added", "removed", "binary"?}``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Line", "as_text", "lines", "make", "parse"]

NO_NEWLINE = "\\ No newline at end of file"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def make(path: str, old: str | None, new: str | None, context: int = 3) -> dict[str, Any]:
    """The entry for a file whose content goes from ``old`` to ``new`` (None: absent)."""
    status = "added" if old is None else "deleted" if new is None else "modified"
    before, after = _lines(old or ""), _lines(new or "")
    hunks = list(difflib.unified_diff(before, after, n=context))[2:]  # without the ---/+++ header
    body = "".join(hunks)
    return _entry(path, status, body)


def _lines(text: str) -> list[str]:
    """Lines with their ends; a last line without one is marked as diff marks it."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n" + NO_NEWLINE + "\n"
    return lines


def _entry(path: str, status: str, body: str, old_path: str | None = None) -> dict[str, Any]:
    added = removed = 0
    for line in body.splitlines():
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    entry: dict[str, Any] = {"path": path, "status": status, "diff": body, "added": added, "removed": removed}
    if old_path is not None and old_path != path:
        entry["old_path"] = old_path
    return entry


def parse(text: str) -> list[dict[str, Any]]:
    """The files of a unified diff; raises ValueError (``PreviewError``'s base) when it has none."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        patch = PatchSet(text)
    except UnidiffParseError as exc:
        raise ValueError(f"diff: not a unified diff ({exc})") from None
    files = []
    for patched in patch:
        path = _strip(patched.target_file if not patched.is_removed_file else patched.source_file)
        old = _strip(patched.source_file)
        status = (
            "added"
            if patched.is_added_file
            else "deleted"
            if patched.is_removed_file
            else "renamed"
            if old != path and not patched.is_added_file
            else "modified"
        )
        body = "".join(str(hunk) for hunk in patched)
        entry = _entry(path, status, body, old if status == "renamed" else None)
        if patched.is_binary_file:
            entry["binary"] = True
        files.append(entry)
    if not files:
        raise ValueError("diff: no file in it (a unified diff starts with --- and +++ lines)")
    return files


def _strip(name: str) -> str:
    for prefix in ("a/", "b/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def as_text(entry: dict[str, Any]) -> str:
    """The entry as a unified diff, with its ``---``/``+++`` header."""
    path = entry["path"]
    old = "/dev/null" if entry.get("status") == "added" else f"a/{entry.get('old_path', path)}"
    new = "/dev/null" if entry.get("status") == "deleted" else f"b/{path}"
    if entry.get("binary"):
        return f"Binary file {path} changed"
    body = str(entry.get("diff", "")).rstrip("\n")
    return f"--- {old}\n+++ {new}" + (f"\n{body}" if body else "")


@dataclass(frozen=True)
class Line:
    """One line of a hunk as the inbox draws it."""

    kind: Literal["hunk", "context", "added", "removed", "note"]
    text: str
    old: int | None = None
    new: int | None = None


def lines(entry: dict[str, Any]) -> list[Line]:
    """The entry's hunks as numbered lines: each old and new line number where it has one."""
    out: list[Line] = []
    old = new = 0
    for raw in str(entry.get("diff", "")).splitlines():
        header = _HUNK.match(raw)
        if header:
            old, new = int(header.group(1)), int(header.group(3))
            out.append(Line("hunk", raw))
        elif raw.startswith("+"):
            out.append(Line("added", raw[1:], new=new))
            new += 1
        elif raw.startswith("-"):
            out.append(Line("removed", raw[1:], old=old))
            old += 1
        elif raw.startswith("\\"):
            out.append(Line("note", raw[2:] if raw.startswith("\\ ") else raw[1:]))
        else:
            out.append(Line("context", raw[1:] if raw.startswith(" ") else raw, old=old, new=new))
            old += 1
            new += 1
    return out
