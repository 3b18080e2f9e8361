"""What a tool call's context says: which client calls, from which session, in which protocol era,
and the plaintext of a 2026-07-28 round trip's sealed state.

``host_forms`` re-exports these names.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp_types.version import is_version_at_least

__all__ = [
    "INPUT_REQUIRED_VERSION",
    "AnyContext",
    "FormState",
    "Mode",
    "client_name",
    "form_state",
    "is_modern",
    "responder",
    "session_key",
]

#: the first protocol version whose tool calls carry a form inside an ``InputRequiredResult``
INPUT_REQUIRED_VERSION = "2026-07-28"

Mode = Literal["form", "url"]

ProcessSession = uuid.uuid4().hex

#: a tool call's context, or a lowlevel handler's (``tasks/get`` and the other extension methods)
AnyContext: TypeAlias = Context | ServerRequestContext[Any, Any]


@dataclass(frozen=True)
class FormState:
    """Our plaintext inside the sealed ``request_state`` of a 2026-07-28 round trip."""

    request_id: str
    attempt: int
    mode: Mode = "form"


def form_state(ctx: Context) -> FormState | None:
    """Our state from a 2026-07-28 retry; the SDK has unsealed (and so authenticated) it."""
    raw = ctx.request_state
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if data.get("v") != 1:
            return None
        mode: Mode = "url" if data.get("m") == "url" else "form"
        return FormState(str(data["r"]), int(data["a"]), mode)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def is_modern(ctx: AnyContext) -> bool:
    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION)


def responder(ctx: AnyContext) -> str:
    """Who answered in the host's form: the client that drew it, never a name it picks for a person."""
    return f"host form ({client_name(ctx) or 'unnamed client'})"


def client_name(ctx: AnyContext) -> str | None:
    params = ctx.session.client_params
    return params.client_info.name if params is not None else None


def session_key(ctx: Context) -> str:
    """Which MCP session a call belongs to: the connection, else the HTTP session, else the process."""
    connection = getattr(ctx.session, "_connection", None)
    state = getattr(connection, "state", None)
    if isinstance(state, dict):
        return "conn:" + str(state.setdefault("hitl_session", uuid.uuid4().hex))
    headers = ctx.headers
    if headers is not None and headers.get("mcp-session-id"):
        return "http:" + headers["mcp-session-id"]
    return "proc:" + ProcessSession
