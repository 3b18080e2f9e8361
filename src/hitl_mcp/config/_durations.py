"""Durations in the config: ``90s``, ``10m``, ``1h30m``, ``2d`` or a number of seconds.

Kept together here until they move to a top-level module that channels share.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from hitl_mcp.config.errors import _describe

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0

_DURATION_HELP = "expected a duration such as 90s, 10m, 24h or a number of seconds"
_UNITS = {"d": DAY, "h": HOUR, "m": MINUTE, "s": 1.0}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms])")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _duration_or_none(value: Any) -> float | None:
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
                m = _DURATION_PART.match(text, pos)
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


def parse_duration(value: Any) -> float:
    """Seconds from a duration: a number of seconds, or text like ``"90s"``, ``"10m"``, ``"1h30m"``, ``"2d"``.

    Raises ``ValueError`` ("expected a duration such as 90s, 10m, 24h or a number of seconds, got 'soon'").
    """
    seconds = _duration_or_none(value)
    if seconds is None:
        raise ValueError(f"{_DURATION_HELP}, got {_describe(value, sensitive=False)}")
    return seconds


def _format_duration(seconds: float) -> str:
    """The short form of a duration: ``90`` -> ``"1m30s"``, ``86400`` -> ``"1d"``, ``0.5`` -> ``"0.5s"``."""
    if seconds < 1 or seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    out = ""
    for unit, size in _UNITS.items():
        count, rest = divmod(rest, int(size))
        if count:
            out += f"{count}{unit}"
    return out or "0s"


def _duration(low: float, high: float) -> Any:
    """A float field that takes a duration and must lie within [low, high] seconds."""

    def validate(value: Any) -> float:
        seconds = _duration_or_none(value)
        if seconds is None:
            raise PydanticCustomError("duration", _DURATION_HELP)
        if not low <= seconds <= high:
            raise PydanticCustomError(
                "duration_range",
                "must be between {low} and {high}",
                {"low": _format_duration(low), "high": _format_duration(high)},
            )
        return seconds

    return Annotated[float, BeforeValidator(validate)]
