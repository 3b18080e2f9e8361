"""Channels, one module each. A channel's type is its module name: ``{type: slack}`` is
``hitl_mcp.channels.slack``. Modules are imported only when a config names their type."""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

#: modules of the kit, not channels: ``base`` and ``testing``, and anything private (``_replies``)
_PRIVATE = {"base", "testing"}


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
