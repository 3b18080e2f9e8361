"""Durations: parsing ``"90s"``, ``"1h30m"``, ``"2d"`` or a number of seconds, and writing them back.

One module for the config, the channels and the tool results, so that channels need not import the
config (which imports them). Two ways of writing a duration, for two readers:

- :func:`short_duration`, exact and compact, for config messages and limits: ``90`` -> ``"1m30s"``;
- :func:`format_duration`, rounded to two units, for people watching a wait: ``65`` -> ``"1m05s"``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0

DURATION_HELP = "expected a duration such as 90s, 10m, 24h or a number of seconds"
_UNITS = {"d": DAY, "h": HOUR, "m": MINUTE, "s": 1.0}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms])")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def duration_or_none(value: Any) -> float | None:
    """Seconds from a duration, or None when ``value`` is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if _NUMBER.fullmatch(text):
            seconds = float(text)
        else:
            seconds, pos, last_rank = 0.0, 0, -1
            order = "dhms"
            while pos < len(text):
                m = _PART.match(text, pos)
                if m is None:
                    return None
                rank = order.index(m.group(2))
                if rank <= last_rank:  # units largest first, each once: 1h30m, not 30m1h
                    return None
                seconds += float(m.group(1)) * _UNITS[m.group(2)]
                pos, last_rank = m.end(), rank
            if last_rank < 0:
                return None
    else:
        return None
    return seconds if math.isfinite(seconds) else None


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 40 else value[:39] + "…")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def parse_duration(value: Any) -> float:
    """Seconds from a duration: a number of seconds, or text like ``"90s"``, ``"10m"``, ``"1h30m"``, ``"2d"``.

    Raises ``ValueError`` ("expected a duration such as 90s, 10m, 24h or a number of seconds, got 'soon'").
    """
    seconds = duration_or_none(value)
    if seconds is None:
        raise ValueError(f"{DURATION_HELP}, got {_shown(value)}")
    return seconds


def short_duration(seconds: float) -> str:
    """The exact short form: ``90`` -> ``"1m30s"``, ``86400`` -> ``"1d"``, ``0.5`` -> ``"0.5s"``."""
    if seconds < 1 or seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    out = ""
    for unit, size in _UNITS.items():
        count, rest = divmod(rest, int(size))
        if count:
            out += f"{count}{unit}"
    return out or "0s"


def format_duration(seconds: float) -> str:
    """Rounded, for a person: ``5`` -> ``"5s"``, ``65`` -> ``"1m05s"``, ``3700`` -> ``"1h01m"``, ``3d2h``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


@dataclasses.dataclass(frozen=True)
class DurationValidator(BeforeValidator):
    """The validator of a field that takes a duration (``bounded``): what reads the config back, such
    as ``hitl-mcp check``, writes its seconds as a duration again (``1d``, not ``86400.0``)."""


@dataclasses.dataclass(frozen=True)
class InstantValidator(BeforeValidator):
    """The validator of a field that takes a moment (an ISO date or date-time, kept as epoch
    seconds): what reads the config back writes it as an ISO time again."""


def bounded(low: float, high: float) -> BeforeValidator:
    """A validator for a float field that takes a duration within [low, high] seconds:
    ``Annotated[float, bounded(1, 300)]``."""

    def validate(value: Any) -> float:
        seconds = duration_or_none(value)
        if seconds is None:
            raise PydanticCustomError("duration", DURATION_HELP)
        if not low <= seconds <= high:
            raise PydanticCustomError(
                "duration_range",
                "must be between {low} and {high}",
                {"low": short_duration(low), "high": short_duration(high)},
            )
        return seconds

    return DurationValidator(validate)
