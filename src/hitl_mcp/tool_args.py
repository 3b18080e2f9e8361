"""How the tools take their arguments: text exactly as sent, errors in plain lines, and the argument
types the tools share (lengths, ranges and the descriptions a model reads).

Built on the SDK's own ``Tool`` (``mcp`` 2.3.0), with two changes:

- **Text stays text.** The SDK (``FuncMetadata.pre_parse_json``) runs ``json.loads`` on every
  string argument whose annotation is not exactly ``str``, to help clients that send lists and
  objects as JSON text. For optional text (``str | None``) that turns
  ``'{"command": "rm -rf build"}'`` into a dict, which then fails validation ("Input should be a
  valid string"), and ``'null'`` silently into ``None``. Text arguments skip that step; the others
  (lists of choices, the approval's ``payload``) are pre-parsed as before.
- **Errors a model can read.** A bad argument is reported one line per error
  (``details: at most 16000 characters``), not as pydantic's dump with its documentation URL.

The description is the function's docstring, dedented.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from pydantic import Field, ValidationError

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context


class ExactTextMetadata(FuncMetadata):
    """``FuncMetadata`` that gives ``text_fields`` back as sent, before validation."""

    text_fields: frozenset[str] = frozenset()

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        for key in self.text_fields & data.keys():
            parsed[key] = data[key]
        return parsed


class HitlTool(Tool):
    """A tool whose argument errors read as one line each."""

    async def run(
        self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False
    ) -> Any:
        try:
            self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            raise ToolError(readable(exc)) from None
        return await super().run(arguments, context, convert_result)


def readable(exc: ValidationError) -> str:
    """One line per error: where, and what is wrong, in words."""
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        message = str(error["msg"])
        if error["type"] == "missing":
            message = "required"
        elif error["type"] == "extra_forbidden":
            message = "not an argument of this tool"
        lines.append(f"{where}: {message[:1].lower()}{message[1:]}")
    return "\n".join(dict.fromkeys(lines))


def is_text(annotation: Any) -> bool:
    """``str``, or ``str`` or ``None`` (however spelled): an argument that is text or absent."""
    if annotation is str:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return set(get_args(annotation)) == {str, type(None)}
    return False


def tool(fn: Callable[..., Any], **options: Any) -> Tool:
    """``Tool.from_function(fn, **options)`` with the changes above."""
    options.setdefault("description", inspect.cleandoc(fn.__doc__ or ""))
    built = Tool.from_function(fn, **options)
    meta = built.fn_metadata
    texts = frozenset(
        field.alias or name
        for name, field in meta.arg_model.model_fields.items()
        if is_text(field.annotation)
    )
    exact = ExactTextMetadata(
        arg_model=meta.arg_model,
        output_schema=meta.output_schema,
        output_model=meta.output_model,
        wrap_output=meta.wrap_output,
        text_fields=texts,
    )
    fields = {name: getattr(built, name) for name in Tool.model_fields}
    return HitlTool(**{**fields, "fn_metadata": exact})


# --- the tools' shared argument types -------------------------------------------------------------

Text = Annotated[str, Field(min_length=1, max_length=4000)]
ChannelList = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=32)]] | None,
    Field(
        min_length=1,
        max_length=10,
        description="Channel names from the server's config to send to; omit for the configured defaults.",
    ),
]
PeopleList = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=32)]] | None,
    Field(
        min_length=1,
        max_length=10,
        description="People from the server's config to ask (on every channel where they have an address), "
        "with or instead of channels; omit for the configured defaults.",
    ),
]
WaitSeconds = Annotated[
    float | None,
    Field(
        ge=0,
        le=86400,
        description="Wait at most this long in this call (clamped to what the host allows; 0: no wait).",
    ),
]
TimeoutSeconds = Annotated[
    float | None,
    Field(
        ge=1,
        le=30 * 86400,
        description="How long the person has to answer before the request expires (default from config).",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=200,
        pattern=r"^[\x21-\x7e]+$",
        description="Your own key for this request: repeating a call with the same key re-attaches to it "
        "instead of asking the person twice.",
    ),
]
RequestId = Annotated[str, Field(min_length=1, max_length=64, description="The request_id a call returned.")]
