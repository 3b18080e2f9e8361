"""``tasks/get`` of a task still working, answered ahead of the SDK's request path: an ASGI app in
front of the MCP endpoint (inside the credential check, which has put the principal in the scope).

Nearly every poll asks after a task nobody has answered yet. The SDK's path for a 2026-07-28
request (its task group, cancel scopes, memory streams, middleware, serialising the result) and our
store reads were most of a poll's cost; this reads the body, recognises a well-formed ``tasks/get``
that declares the extension, finds the task in ``TaskMemory`` (the caller's own, working, not due)
and writes the answer. Anything else, or anything unusual about the request (a header that does
not match the body, a missing capability, an Accept the SDK would refuse), goes to the SDK
unchanged, with the body it sent: the answer is the same either way, as a test checks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hitl_mcp.core.models import now
from hitl_mcp.core.principal import PRINCIPAL_KEY, Principal
from hitl_mcp.mcp.tasks.memory import TaskMemory
from hitl_mcp.mcp.tasks.pace import Pace
from hitl_mcp.mcp.tasks.wire import EXTENSION

__all__ = ["FastPolls"]

MODERN = frozenset(v.encode() for v in MODERN_PROTOCOL_VERSIONS)
#: larger than any tasks/get a client sends: a longer body is not one, and goes to the SDK
MAX_BODY = 8192
VERSION_META = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
JSON_HEADERS = [(b"content-type", b"application/json")]


def _accepts(accept: bytes) -> bool:
    """JSON and SSE both acceptable, as the SDK's SSE mode requires of every POST."""
    kinds = {part.split(b";")[0].strip().lower() for part in accept.split(b",")}
    if b"*/*" in kinds:
        return True
    return bool(kinds & {b"application/json", b"application/*"}) and bool(
        kinds & {b"text/event-stream", b"text/*"}
    )


def _headers(scope: Scope) -> dict[bytes, bytes] | None:
    """The headers that matter here, if this can be a 2026-07-28 ``tasks/get``."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in (b"mcp-method", b"mcp-protocol-version", b"mcp-name", b"accept"):
            if name in found:
                return None  # the SDK refuses a repeated routing header
            found[name] = value
    if found.get(b"mcp-method") != b"tasks/get" or found.get(b"mcp-protocol-version") not in MODERN:
        return None
    if b"mcp-name" not in found or not _accepts(found.get(b"accept", b"")):
        return None
    return found


def poll(body: bytes, headers: dict[bytes, bytes]) -> tuple[Any, str] | None:
    """The JSON-RPC id and task id of a well-formed ``tasks/get`` declaring the extension."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or message.get("method") != "tasks/get"
    ):
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("taskId"), str):
        return None
    meta = params.get("_meta")
    if not isinstance(meta, dict) or meta.get(VERSION_META) != headers[b"mcp-protocol-version"].decode():
        return None
    capabilities = meta.get(CAPABILITIES_META)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    if not isinstance(extensions, dict) or EXTENSION not in extensions:
        return None
    task_id: str = params["taskId"]
    if headers[b"mcp-name"] != task_id.encode():
        return None
    return request_id, task_id


class FastPolls:
    def __init__(
        self,
        app: ASGIApp,
        memory: TaskMemory,
        pace: Pace,
        listened: Callable[[str], bool],
        server_info: dict[str, Any],
    ) -> None:
        self.app = app
        self.server_info = server_info
        self.memory = memory
        self.pace = pace
        self.listened = listened
        self.answered = 0
        """Polls answered here (for the benches and tests)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope) if scope["type"] == "http" and scope["method"] == "POST" else None
        principal = scope.get(PRINCIPAL_KEY)
        if headers is None or not isinstance(principal, Principal) or not self.memory:
            await self.app(scope, receive, send)
            return
        body, complete = await _body(receive)
        found = poll(body, headers) if complete else None
        answer = None if found is None else await self.answer(found[1], principal.owner)
        if found is None or answer is None:
            await self.app(scope, _replay(body, complete, receive), send)
            return
        self.answered += 1
        payload = {"jsonrpc": "2.0", "id": found[0], "result": answer}
        data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [*JSON_HEADERS, (b"content-length", str(len(data)).encode())],
        }
        await send(start)
        await send({"type": "http.response.body", "body": data})

    async def answer(self, task_id: str, owner: str) -> dict[str, Any] | None:
        clock = now()
        entry = self.memory.working(task_id, owner, clock)
        if entry is None:
            return None
        if self.pace.stale(time.monotonic()):
            await self.pace.recount(time.monotonic())
        interval = self.pace.interval(clock - entry.created_at, listened=self.listened(task_id))
        # as the SDK finishes every 2026-07-28 result: its type, and who answered
        return {
            **entry.task(task_id, clock, interval),
            "resultType": "complete",
            "_meta": {SERVER_INFO: self.server_info},
        }


async def _body(receive: Receive) -> tuple[bytes, bool]:
    """The request's body, up to ``MAX_BODY`` (and whether that is all of it)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False  # a disconnect: the SDK sees it too
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > MAX_BODY:
            return b"".join(chunks), False


def _replay(body: bytes, complete: bool, receive: Receive) -> Receive:
    """``receive`` as if nothing had been read: what was read comes first, as one message."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replayed
