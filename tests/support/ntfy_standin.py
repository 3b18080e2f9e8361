"""A local ntfy server: publishing (JSON to the root, text to ``/<topic>``), the ``/<topic>/json``
subscription (NDJSON, ``since``, ``poll=1``), access tokens, the three-action limit, updating and
deleting by sequence id, and 429s; in ntfy's wire format as a real ntfy 2.26 answers (ids, ``time``,
``expires``, ``event``, action ids; see docs/publish.md and docs/subscribe/api.md).

It also plays the phone: :func:`tap` performs an ``http`` action exactly as ntfy specifies it (the
method defaults to POST; the action's headers and body, nothing else), against the URL in the action,
so a test can only press a button that was really published.

Every call and every stream opened or closed fires ``changes``, so tests await conditions.
"""

from __future__ import annotations

import json
import re
import secrets
import string
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectSendStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.events import Changes

TOPIC_RE = re.compile(r"[-_A-Za-z0-9]{1,64}")
_ID_CHARS = string.ascii_letters + string.digits
CACHE_SECONDS = 12 * 3600


def _id(n: int = 12) -> str:
    return "".join(secrets.choice(_ID_CHARS) for _ in range(n))


def _error(status: int, code: int, error: str) -> JSONResponse:
    return JSONResponse({"code": code, "http": status, "error": error}, status_code=status)


@dataclass
class Subscription:
    topic: str
    since: str | None
    poll: bool
    token: str | None
    open: bool = True


@dataclass
class NtfyStandin:
    #: access tokens and what each may do per topic ("rw", "ro", "wo"); empty: everyone may do anything
    tokens: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ntfy 2.16+ echoes and honours sequence_id; an older server ignores it
    supports_sequence: bool = True
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    subscriptions: list[Subscription] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    _live: list[tuple[str, MemoryObjectSendStream[dict[str, Any]]]] = field(default_factory=list)
    _limited: list[float | None] = field(default_factory=list)
    #: while set, a new subscription waits here before it is answered
    hold: anyio.Event | None = None

    # --- what a test looks at -----------------------------------------------------------------

    def published(self, topic: str) -> list[dict[str, Any]]:
        """The topic's ``message`` events, oldest first."""
        return [m for m in self.messages.get(topic, []) if m["event"] == "message"]

    def shown(self, topic: str) -> list[dict[str, Any]]:
        """What a 2.16+ phone shows: the latest version of each sequence, minus deleted ones."""
        latest: dict[str, dict[str, Any]] = {}
        for m in self.messages.get(topic, []):
            key = m.get("sequence_id") or m["id"]
            if m["event"] == "message_delete":
                latest.pop(key, None)
            elif m["event"] == "message":
                latest.pop(key, None)  # keep arrival order: an update moves to the end
                latest[key] = m
        return list(latest.values())

    def live(self, topic: str) -> int:
        return sum(1 for t, _ in self._live if t == topic)

    def limit(self, times: int = 1, retry_after: float | None = None) -> None:
        """Answer the next ``times`` publishes with 429 (visitor request limit)."""
        self._limited.extend([retry_after] * times)

    async def drop(self) -> None:
        """End every open subscription stream, as a restarting server or a lost connection would."""
        live, self._live = self._live, []
        for _, sender in live:
            await sender.aclose()
        self.changes.fire()

    # --- the server ---------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/", self._publish_json, methods=["POST", "PUT"]),
                Route("/v1/health", self._health, methods=["GET"]),
                Route("/{topic}/json", self._subscribe, methods=["GET"]),
                Route("/{topic}", self._publish_text, methods=["POST", "PUT"]),
                Route("/{topic}/{sid}", self._publish_text, methods=["POST", "PUT"]),
                Route("/{topic}/{sid}", self._delete, methods=["DELETE"]),
                Route("/{topic}/{sid}/clear", self._clear, methods=["PUT"]),
            ]
        )

    def _token(self, http: Request) -> str | None:
        auth = http.headers.get("authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else None

    def _denied(self, http: Request, topic: str, write: bool) -> Response | None:
        if not self.tokens:
            return None
        token = self._token(http)
        if token is None:
            return _error(403, 40301, "forbidden")  # auth-default-access: deny-all
        if token not in self.tokens:
            return _error(401, 40101, "unauthorized")
        mode = self.tokens[token].get(topic, "")
        if ("w" if write else "r") not in mode.replace("o", ""):
            return _error(403, 40301, "forbidden")
        return None

    async def _health(self, http: Request) -> Response:
        self.changes.fire()
        return JSONResponse({"healthy": True})

    async def _publish_json(self, http: Request) -> Response:
        try:
            data = json.loads(await http.body())
        except ValueError:
            return _error(400, 40024, "invalid request: request body must be message JSON")
        topic = data.get("topic") if isinstance(data, dict) else None
        if not isinstance(topic, str) or not TOPIC_RE.fullmatch(topic):
            return _error(400, 40009, "invalid request: topic invalid")
        return await self._accept(http, topic, data)

    async def _publish_text(self, http: Request) -> Response:
        topic = http.path_params["topic"]
        if not TOPIC_RE.fullmatch(topic):
            return _error(404, 40401, "page not found")
        data: dict[str, Any] = {"message": (await http.body()).decode(errors="replace")}
        sid = http.path_params.get("sid") or http.headers.get("x-sequence-id")
        if sid:
            data["sequence_id"] = sid
        return await self._accept(http, topic, data)

    async def _accept(self, http: Request, topic: str, data: dict[str, Any]) -> Response:
        self.changes.fire()
        if self._limited:
            wait = self._limited.pop(0)
            headers = {"Retry-After": str(int(wait))} if wait is not None else {}
            response = _error(429, 42901, "limit reached: too many requests")
            response.headers.update(headers)
            return response
        denied = self._denied(http, topic, write=True)
        if denied is not None:
            return denied
        actions = data.get("actions") or []
        if len(actions) > 3:
            return _error(400, 40018, "invalid request: actions invalid: too many actions, max 3 allowed")
        for action in actions:
            if action.get("action") not in ("view", "http", "broadcast") or not action.get("label"):
                return _error(400, 40018, "invalid request: actions invalid")
        now = int(time.time())
        message: dict[str, Any] = {"id": _id(), "time": now, "expires": now + CACHE_SECONDS}
        if self.supports_sequence and data.get("sequence_id"):
            message["sequence_id"] = data["sequence_id"]
        message |= {"event": "message", "topic": topic}
        for key in ("title", "message", "priority", "tags", "click"):
            if data.get(key) not in (None, "", []):
                message[key] = data[key]
        message.setdefault("message", "triggered")
        if actions:
            message["actions"] = [{"id": _id(10), **a} for a in actions]
        await self._store(topic, message)
        return JSONResponse(message)

    async def _delete(self, http: Request) -> Response:
        return await self._sequence_event(http, "message_delete")

    async def _clear(self, http: Request) -> Response:
        return await self._sequence_event(http, "message_clear")

    async def _sequence_event(self, http: Request, event: str) -> Response:
        self.changes.fire()
        topic, sid = http.path_params["topic"], http.path_params["sid"]
        denied = self._denied(http, topic, write=True)
        if denied is not None:
            return denied
        if not self.supports_sequence:
            return _error(405, 40501, "method not allowed")
        now = int(time.time())
        message = {"id": _id(), "sequence_id": sid, "time": now, "event": event, "topic": topic}
        await self._store(topic, message)
        return JSONResponse(message)

    async def _store(self, topic: str, message: dict[str, Any]) -> None:
        self.messages.setdefault(topic, []).append(message)
        for where, sender in list(self._live):
            if where == topic:
                try:
                    await sender.send(message)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
        self.changes.fire()

    def _since(self, topic: str, since: str | None) -> list[dict[str, Any]]:
        cached = self.messages.get(topic, [])
        if since is None or (since == "latest" and not cached):
            return []
        if since == "all":
            return list(cached)
        if since == "latest":
            return cached[-1:]
        if since.isdigit():
            return [m for m in cached if m["time"] >= int(since)]
        ids = [m["id"] for m in cached]
        return cached[ids.index(since) + 1 :] if since in ids else list(cached)

    async def _subscribe(self, http: Request) -> Response:
        topic = http.path_params["topic"]
        since = http.query_params.get("since")
        poll = http.query_params.get("poll") in ("1", "true", "yes")
        sub = Subscription(topic, since, poll, self._token(http))
        self.subscriptions.append(sub)
        self.changes.fire()
        if self.hold is not None:
            await self.hold.wait()
        denied = self._denied(http, topic, write=False)
        if denied is not None:
            sub.open = False
            return denied
        backlog = self._since(topic, since)
        if poll:
            sub.open = False
            body = "".join(json.dumps(m) + "\n" for m in backlog)
            return Response(body, media_type="application/x-ndjson")
        sender, receiver = anyio.create_memory_object_stream[dict[str, Any]](100)
        self._live.append((topic, sender))

        async def lines() -> AsyncIterator[str]:
            try:
                yield (
                    json.dumps({"id": _id(), "time": int(time.time()), "event": "open", "topic": topic})
                    + "\n"
                )
                for m in backlog:
                    yield json.dumps(m) + "\n"
                async with receiver:
                    async for m in receiver:
                        yield json.dumps(m) + "\n"
            finally:
                sub.open = False
                self._live = [(t, s) for t, s in self._live if s is not sender]
                self.changes.fire()

        return StreamingResponse(lines(), media_type="application/x-ndjson")


async def tap(action: dict[str, Any], client: httpx2.AsyncClient | None = None) -> httpx2.Response:
    """Press an ``http`` action button as the ntfy app does: ``method`` (default POST), ``headers``
    and ``body`` (default empty), to the action's ``url``; nothing added, nothing taken away."""
    assert action["action"] == "http", f"not an http action: {action['action']}"
    method = action.get("method") or "POST"
    body = action.get("body") or ""
    headers = dict(action.get("headers") or {})
    if client is not None:
        return await client.request(method, action["url"], headers=headers, content=body.encode())
    async with httpx2.AsyncClient() as own:
        return await own.request(method, action["url"], headers=headers, content=body.encode())
