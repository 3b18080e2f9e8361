"""Text arguments reach the tools exactly as the client sent them.

The SDK (``mcp`` 2.3.0, ``FuncMetadata.pre_parse_json``) runs ``json.loads`` on every string
argument whose annotation is not exactly ``str``, to help clients that send lists and objects as
JSON text. For optional text (``str | None``) that turns ``'{"command": "rm -rf build"}'`` into a
dict, which then fails validation ("Input should be a valid string"), and ``'null'`` silently into
``None``. ``tool`` builds a tool whose text arguments skip that step; every other argument (lists
of choices, the approval's ``payload``) is pre-parsed as before.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin

from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata


class ExactTextMetadata(FuncMetadata):
    """``FuncMetadata`` that gives ``text_fields`` back as sent, before validation."""

    text_fields: frozenset[str] = frozenset()

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        for key in self.text_fields & data.keys():
            parsed[key] = data[key]
        return parsed


def is_text(annotation: Any) -> bool:
    """``str``, or ``str`` or ``None`` (however spelled): an argument that is text or absent."""
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return set(get_args(annotation)) == {str, type(None)}
    return False


def tool(fn: Callable[..., Any], **kwargs: Any) -> Tool:
    """``Tool.from_function(fn, **kwargs)``, with its text arguments kept exactly as sent."""
    built = Tool.from_function(fn, **kwargs)
    meta = built.fn_metadata
    fields = meta.arg_model.model_fields
    texts = frozenset(field.alias or name for name, field in fields.items() if is_text(field.annotation))
    exact = ExactTextMetadata(
        arg_model=meta.arg_model,
        output_schema=meta.output_schema,
        output_model=meta.output_model,
        wrap_output=meta.wrap_output,
        text_fields=texts,
    )
    return built.model_copy(update={"fn_metadata": exact})
