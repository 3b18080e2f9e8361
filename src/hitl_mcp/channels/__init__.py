"""Channels, one module each. A channel's type is its module name: ``{type: slack}`` is
``hitl_mcp.channels.slack``. Modules are imported only when a config names their type."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

#: modules of the kit, not channels: ``base``, ``fitting``, ``testing``, and anything private (``_replies``)
_PRIVATE = {"base", "fitting", "testing"}


def _is_channel(name: str) -> bool:
    return name not in _PRIVATE and not name.startswith("_")


def channel_types() -> list[str]:
    """Every channel type this installation has."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if _is_channel(m.name))


def channel_module(type_name: str) -> ModuleType:
    """The module for a channel type; ``KeyError`` naming the valid ones when there is none."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", type_name) or not _is_channel(type_name):
        raise KeyError(type_name)
    if type_name not in channel_types():
        raise KeyError(type_name)
    return importlib.import_module(f"{__name__}.{type_name}")


def missing_libraries(channels: Mapping[str, Any]) -> str | None:
    """One line saying what to install when a configured channel's library is not installed (the
    extra it comes with), else None. Found without importing anything: start-up stays fast."""
    lacking: list[tuple[str, str, list[str]]] = []
    extras: set[str] = set()
    for name, cfg in channels.items():
        cls = channel_module(cfg.type).Channel
        absent = [lib for lib in cls.libraries(cfg) if not _installed(lib)]
        if absent:
            lacking.append((name, cfg.type, absent))
            extras.add(cls.extra or cfg.type)
    if not lacking:
        return None
    install = f"pip install 'mcp-hitl[{','.join(sorted(extras))}]'"
    if len(lacking) == 1:
        ((name, type_name, absent),) = lacking
        what = " and ".join(absent)
        return (
            f"channel {name!r} (type {type_name}) needs {what}, which {'is' if len(absent) == 1 else 'are'} "
            f"not installed: {install}"
        )
    which = ", ".join(f"{name!r} ({type_name}: {', '.join(absent)})" for name, type_name, absent in lacking)
    return f"channels {which} need libraries that are not installed: {install}"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
