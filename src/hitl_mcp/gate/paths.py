"""Paths into a tool call's arguments, as the gate's rules name them: ``command``, ``options.mode``,
``files[0].path`` (optionally starting ``$.``)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["lookup", "split_path"]

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list[str | int]:
    text = path[2:] if path.startswith("$.") else path
    parts: list[str | int] = []
    pos = 0
    while pos < len(text):
        if text[pos] == ".":
            pos += 1
        found = _PATH_PART.match(text, pos)
        if found is None:
            return []
        parts.append(found.group(1) if found.group(1) is not None else int(found.group(2)))
        pos = found.end()
    return parts


def lookup(arguments: Any, path: str) -> tuple[bool, Any]:
    """The value at ``path`` (``a.b[0].c``, optionally starting ``$.``), and whether it is there."""
    value = arguments
    for part in split_path(path):
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return False, None
    return True, value
