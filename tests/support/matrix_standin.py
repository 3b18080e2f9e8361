"""A local Matrix homeserver: the client-server API routes hitl-mcp calls (v3), in Matrix's wire
format, so the real matrix-nio talks to it through ``homeserver`` (and validates every answer against
its JSON schemas).

It wants the access token (``Authorization: Bearer`` or ``?access_token=``; ``M_UNKNOWN_TOKEN``
otherwise), takes ``PUT …/send/{type}/{txnId}`` idempotently per transaction id, answers ``/sync`` as a
real long poll (held until an event arrives after ``since`` or the timeout passes), and says whether
the room is encrypted (``encrypted=True``: an ``m.room.encryption`` state event).

It also plays the people: ``react`` annotates an event, ``reply`` answers one (a rich reply with its
quoted fallback, or in its thread); ``replay`` hands an event to the next sync again. Every call fires
``changes``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.events import Changes, until

TOKEN = "syt_aGl0bA_standinTokenSecret_0a1b2c"
BOT = "@hitl:hs.test"
ROOM = "!approvals:hs.test"
SAM, ANA, EVE = "@sam:hs.test", "@ana:hs.test", "@eve:hs.test"
_ids = itertools.count(1)


@dataclass
class Event:
    type: str
    sender: str
    content: dict[str, Any]
    event_id: str = field(default_factory=lambda: f"$e{next(_ids)}")
    ts: int = field(default_factory=lambda: int(time.time() * 1000))

    def payload(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "event_id": self.event_id,
            "sender": self.sender,
            "origin_server_ts": self.ts,
            "content": self.content,
            "unsigned": {},
        }

    @property
    def relates(self) -> dict[str, Any]:
        return self.content.get("m.relates_to") or {}


class MatrixStandin:
    def __init__(self, encrypted: bool = False) -> None:
        self.changes = Changes()
        self.encrypted = encrypted
        self.timeline: list[Event] = []  # the room's events, in order: a sync batch is an index
        self._txns: dict[str, str] = {}
        self._arrived = anyio.Event()
        self.syncs = 0
        self.closed = False
        base = "/_matrix/client/v3"
        self.app = Starlette(
            routes=[
                Route(f"{base}/account/whoami", self._whoami),
                Route(f"{base}/sync", self._sync),
                Route(f"{base}/rooms/{{room}}/send/{{type}}/{{txn}}", self._send, methods=["PUT"]),
                Route(f"{base}/rooms/{{room}}/state/{{type}}/", self._state),
                Route(f"{base}/rooms/{{room}}/state/{{type}}", self._state),
            ]
        )

    async def until(self, check: Any, seconds: float = 10) -> Any:
        return await until(check, self.changes, seconds)

    def sent(self) -> list[Event]:
        """What the bot sent: messages, edits and notices, in order."""
        return [e for e in self.timeline if e.sender == BOT]

    def edits_of(self, event: Event) -> list[Event]:
        return [
            e
            for e in self.sent()
            if e.relates.get("rel_type") == "m.replace" and e.relates["event_id"] == event.event_id
        ]

    def in_thread(self, event: Event) -> list[Event]:
        return [
            e
            for e in self.sent()
            if e.relates.get("rel_type") == "m.thread" and e.relates["event_id"] == event.event_id
        ]

    def _add(self, event: Event) -> Event:
        self.timeline.append(event)
        self._arrived.set()
        self._arrived = anyio.Event()
        self.changes.fire()
        return event

    def close(self) -> None:
        """Let every long poll go (before the server shuts down: it waits for them)."""
        self.closed = True
        self._arrived.set()

    # --- the API ---------------------------------------------------------------------------------

    def _refused(self, request: Request) -> Response | None:
        self.changes.fire()
        sent = request.headers.get("authorization", "").removeprefix("Bearer ") or request.query_params.get(
            "access_token"
        )
        if sent != TOKEN:
            return JSONResponse(
                {"errcode": "M_UNKNOWN_TOKEN", "error": "Unknown access token"}, status_code=401
            )
        return None

    async def _whoami(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse({"user_id": BOT, "device_id": "HITLMCP"})

    async def _send(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        if request.path_params["room"] != ROOM:
            return JSONResponse(
                {"errcode": "M_FORBIDDEN", "error": "You are not in this room."}, status_code=403
            )
        txn = request.path_params["txn"]
        if txn not in self._txns:  # a retried transaction is the same event
            event = Event(request.path_params["type"], BOT, await request.json())
            self._txns[txn] = self._add(event).event_id
        return JSONResponse({"event_id": self._txns[txn]})

    async def _state(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        if request.path_params["room"] != ROOM:
            return JSONResponse(
                {"errcode": "M_FORBIDDEN", "error": "You are not in this room."}, status_code=403
            )
        if request.path_params["type"] == "m.room.encryption" and self.encrypted:
            return JSONResponse({"algorithm": "m.megolm.v1.aes-sha2"})
        return JSONResponse({"errcode": "M_NOT_FOUND", "error": "Event not found."}, status_code=404)

    async def _sync(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        self.syncs += 1
        since = int(request.query_params.get("since") or 0)
        timeout = int(request.query_params.get("timeout") or 0) / 1000
        with anyio.move_on_after(timeout):
            while len(self.timeline) <= since and not self.closed:
                await self._arrived.wait()
        events = [e.payload() for e in self.timeline[since:]]
        room = {
            "timeline": {"events": events, "limited": False, "prev_batch": str(since)},
            "state": {"events": []},
            "ephemeral": {"events": []},
            "account_data": {"events": []},
            "summary": {},
            "unread_notifications": {"highlight_count": 0, "notification_count": 0},
        }
        return JSONResponse(
            {
                "next_batch": str(len(self.timeline)),
                "rooms": {"join": {ROOM: room} if events else {}, "invite": {}, "leave": {}},
                "to_device": {"events": []},
                "account_data": {"events": []},
                "presence": {"events": []},
                "device_lists": {"changed": [], "left": []},
                "device_one_time_keys_count": {},
            }
        )

    # --- the people ------------------------------------------------------------------------------

    def react(self, event: Event, key: str, user: str) -> Event:
        relates = {"rel_type": "m.annotation", "event_id": event.event_id, "key": key}
        return self._add(Event("m.reaction", user, {"m.relates_to": relates}))

    def reply(self, event: Event, text: str, user: str, thread: bool = False) -> Event:
        quoted = "\n".join(f"> {line}" for line in event.content.get("body", "").splitlines()[:3])
        if thread:
            relates = {
                "rel_type": "m.thread",
                "event_id": event.event_id,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": event.event_id},
            }
            body = text
        else:
            relates = {"m.in_reply_to": {"event_id": event.event_id}}
            body = f"{quoted}\n\n{text}"
        return self._add(
            Event("m.room.message", user, {"msgtype": "m.text", "body": body, "m.relates_to": relates})
        )

    def replay(self, event: Event) -> None:
        """The same event in a later batch (a sync retried, a server redelivering)."""
        self._add(event)
