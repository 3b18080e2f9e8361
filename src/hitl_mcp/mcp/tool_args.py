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

**Listed before they are built.** A tool's JSON schemas (arguments, result) are what ``tools/list``
needs; building its argument model and computing the schemas is about 0.1 G instructions of a cold
start for the five. So each tool is listed from ``tool_schemas.json`` (what ``Tool.from_function``
computes, written by ``scripts/tool_schemas.py`` and checked by ``tests/mcp/test_tools.py``), and built as
before at its first call. A tool missing from that file is built at once.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError

from hitl_mcp.core.quorum import Quorum
from hitl_mcp.mcp.tool_schemas import SCHEMAS

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from hitl_mcp.core.previews import Preview


class ExactTextMetadata(FuncMetadata):
    """``FuncMetadata`` that gives ``text_fields`` back as sent, before validation."""

    model_config = ConfigDict(defer_build=True)  # made when a tool is first built, not at the start

    text_fields: frozenset[str] = frozenset()

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        parsed = super().pre_parse_json(data)
        for key in self.text_fields & data.keys():
            parsed[key] = data[key]
        return parsed


log = logging.getLogger("hitl_mcp.mcp.server")


class HitlTool(Tool):
    """A tool whose argument errors read as one line each."""

    _unbuilt: dict[str, Any] | None = PrivateAttr(default=None)
    """Listed from ``tool_schemas.json``: the options to build it with at its first call."""

    async def run(
        self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False
    ) -> Any:
        if self._unbuilt is not None:
            self._build(self._unbuilt)
        try:
            self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            raise ToolError(readable(exc)) from None
        return await super().run(arguments, context, convert_result)

    def _build(self, options: dict[str, Any]) -> None:
        built = _built(self.fn, options)
        if (built.parameters, built.output_schema) != (self.parameters, self.output_schema):
            log.error(
                "hitl-mcp: %s's schemas differ from tool_schemas.py (regenerate it: python -m "
                "hitl_mcp.mcp.tool_schemas); validating with the built ones",
                self.name,
            )
        for name in Tool.model_fields:
            setattr(self, name, getattr(built, name))
        self._unbuilt = None


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


def tool(fn: Callable[..., Any], *, listed: bool = True, **options: Any) -> Tool:
    """``Tool.from_function(fn, **options)`` with the changes above; ``listed``: from
    ``tool_schemas.json`` until its first call (False: built at once, to compute that file)."""
    options.setdefault("description", inspect.cleandoc(fn.__doc__ or ""))
    name = options.get("name") or fn.__name__
    known = SCHEMAS.get(name) if listed else None
    if known is None:
        return _built(fn, options)
    shown = HitlTool(
        fn=fn,
        name=name,
        title=options.get("title"),
        description=options["description"],
        parameters=known["parameters"],
        # what tools/list reads of it until the first call builds the real one
        fn_metadata=FuncMetadata.model_construct(
            arg_model=ArgModelBase, output_schema=known["output_schema"], output_model=None
        ),
        is_async=known["is_async"],
        context_kwarg=known["context_kwarg"],
        annotations=options.get("annotations"),
        icons=options.get("icons"),
        meta=options.get("meta"),
    )
    shown._unbuilt = options
    return shown


def listed_schemas(tools: list[Tool]) -> dict[str, dict[str, Any]]:
    """What ``tool_schemas.py`` holds of each tool."""
    return {
        t.name: {
            "parameters": t.parameters,
            "output_schema": t.output_schema,
            "is_async": t.is_async,
            "context_kwarg": t.context_kwarg,
        }
        for t in tools
    }


def _built(fn: Callable[..., Any], options: dict[str, Any]) -> HitlTool:
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
Approvals = Annotated[
    Quorum | None,
    Field(
        description="Several approvers: {required: 2, of: [people], veto: any|none}. Each person counts "
        "once; by default one denial denies. Omit for one approval (or the configured default).",
    ),
]
PREVIEW_HELP = (
    "What the action will do, as the person should read it: {kind: diff, diff | files: "
    "[{path, old, new}]}, {kind: command, command (line or argv), cwd?}, {kind: sql, statement, "
    "dialect?}, {kind: table, columns, rows}, {kind: json, value} or {kind: markdown, text}; "
    "optional title. Shown in full (or approved only in the inbox when a channel cannot show it "
    "whole); its SHA-256 is returned as preview_sha256."
)
if TYPE_CHECKING:
    PreviewArg = Annotated[Preview | None, Field(description=PREVIEW_HELP)]


def __getattr__(name: str) -> Any:
    """``PreviewArg``, made when a tool that takes it is built (its first call, ``HitlTool.run``):
    the previews' models then load with it, not at every server's start (``bench/cold_start.py``).
    ``server.py`` names it as ``tool_args.PreviewArg`` for that."""
    if name != "PreviewArg":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from hitl_mcp.core.previews import Preview

    made = Annotated[Preview | None, Field(description=PREVIEW_HELP)]
    globals()[name] = made
    return made


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
ReportStatus = Annotated[
    Literal["executed", "failed", "skipped"],
    Field(description="What you did after the decision: executed it, it failed, or you skipped it."),
]
Summary = Annotated[str | None, Field(max_length=4000, description="What happened, in a line or two.")]
ResultSha256 = Annotated[
    str | None, Field(pattern="^[0-9a-f]{64}$", description="SHA-256 (hex) of the result, if you keep it.")
]
