"""The five tools' JSON schemas as ``Tool.from_function`` computes them, kept in ``tool_schemas.json``
for ``tools/list`` before the tools are built (``tool_args``). Generated: ``python -m
hitl_mcp.tool_schemas``; ``tests/test_tools.py`` fails when they differ from what the tools give.
Without the file, every tool is built at once, as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("tool_schemas.json")


def _load() -> dict[str, dict[str, Any]]:
    try:
        loaded: dict[str, dict[str, Any]] = json.loads(FILE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return loaded


SCHEMAS = _load()


def computed() -> dict[str, dict[str, Any]]:
    """The schemas from the tools as they are (each built, as without the file)."""
    from hitl_mcp import tool_args
    from hitl_mcp.server import build_server
    from hitl_mcp.tool_settings import Settings

    async def no_broker() -> Any:
        raise AssertionError("not called")

    tool_args.USE_SCHEMAS = False
    try:
        mcp = build_server(no_broker, Settings())
    finally:
        tool_args.USE_SCHEMAS = True
    return tool_args.listed_schemas(mcp._tool_manager.list_tools())


if __name__ == "__main__":
    FILE.write_text(json.dumps(computed(), indent=1) + "\n", encoding="utf-8")
