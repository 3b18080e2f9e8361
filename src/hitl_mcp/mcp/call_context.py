"""What a tool call's context says: which principal calls (``principal.py``), with which client, from
which session, in which protocol era, and the plaintext of a 2026-07-28 round trip's sealed state.

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

from hitl_mcp.core.models import Request
from hitl_mcp.core.principal import PRINCIPAL_KEY, Principal

__all__ = [
    "INPUT_REQUIRED_VERSION",
    "AnyContext",
    "FormState",
    "Mode",
    "asked_here",
    "client_name",
    "form_state",
    "is_modern",
    "principal_of",
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


class Unauthenticated(Exception):
    """An HTTP call that reached a tool without the credential check: refused, never guessed."""


def principal_of(ctx: AnyContext, agent: str | None = None) -> Principal:
    """Who calls: over HTTP, the principal the credential check proved; over stdio (no HTTP request),
    the host that spawned this process, told apart by its client's name (and ``server.agent``)."""
    request = (ctx.request_context if isinstance(ctx, Context) else ctx).request
    if request is None:
        return Principal.stdio(client_name(ctx), agent)
    principal = getattr(request, "scope", {}).get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise Unauthenticated("this HTTP call carries no credential the server checked")
    return principal


def asked_here(ctx: AnyContext, request: Request) -> bool:
    """Whether this call is where ``request`` was asked (``session_key``): only there is the host's
    form offered, and only from there does its answer count, whatever name the caller declares."""
    return request.session_key is not None and request.session_key == session_key(ctx)


def responder(ctx: AnyContext) -> str:
    """Who answered in the host's form: the client that drew it, and over HTTP the principal it
    signed in as; never a name it picks for a person."""
    name = client_name(ctx) or "unnamed client"
    request = (ctx.request_context if isinstance(ctx, Context) else ctx).request
    if request is None:
        return f"host form ({name})"
    return f"host form ({name}, {principal_of(ctx).label})"


def client_name(ctx: AnyContext) -> str | None:
    params = ctx.session.client_params
    return params.client_info.name if params is not None else None


def session_key(ctx: AnyContext) -> str:
    """Which MCP session a call belongs to: the connection, else the HTTP session, else the process.
    2026-07-28 has no sessions (each request is a connection of its own): there it is the process over
    stdio (one host), and over HTTP the principal the credential check proved."""
    request = (ctx.request_context if isinstance(ctx, Context) else ctx).request
    if is_modern(ctx):
        return "proc:" + ProcessSession if request is None else "principal:" + principal_of(ctx).owner
    connection = getattr(ctx.session, "_connection", None)
    state = getattr(connection, "state", None)
    if isinstance(state, dict):
        return "conn:" + str(state.setdefault("hitl_session", uuid.uuid4().hex))
    headers = getattr(request, "headers", None)
    if headers is not None and headers.get("mcp-session-id"):
        return "http:" + str(headers["mcp-session-id"])
    return "proc:" + ProcessSession
