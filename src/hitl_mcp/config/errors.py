"""Config errors: ``FILE:LINE: KEY: MESSAGE``, and pydantic's ``ValidationError`` said in those words.

Values that came from the environment and values of secret fields never appear in a message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

KeyPath = tuple[str | int, ...]


class ConfigError(Exception):
    """A config problem: ``str(e)`` is ``"FILE:LINE: KEY: MESSAGE"``, leaving out the parts not known.

    ``more`` holds the other problems found in the same pass (this one is the first in file order),
    so a ``check`` command can list them all.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        more: Iterable[ConfigError] = (),
    ) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.message = message
        self.more: list[ConfigError] = list(more)
        super().__init__(str(self))

    def __str__(self) -> str:
        parts: list[str] = []
        if self.file is not None and self.line is not None:
            parts.append(f"{self.file}:{self.line}")
        elif self.file is not None:
            parts.append(self.file)
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.key:
            parts.append(self.key)
        parts.append(self.message)
        return ": ".join(parts)


def _key_text(path: KeyPath) -> str | None:
    """``("channels", "ops-slack", "allowed_users", 0)`` -> ``channels.ops-slack.allowed_users[0]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{_show(part)}]"
    return out or None


def _show(value: str, limit: int = 40) -> str:
    """A string for an error message: quoted, truncated."""
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return repr(value)
