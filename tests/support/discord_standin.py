"""A local Discord: the REST routes hitl-mcp calls (API v10) and the gateway WebSocket, in Discord's
wire format, so the real discord.py talks to it through ``api_base``.

REST wants ``Authorization: Bot <token>`` on every call (401 otherwise), refuses what Discord refuses
(content over 2,000 characters, a ``custom_id`` over 100, a label over 80, more than 5 buttons a row or
5 rows, a second response to one interaction: 40060), and can answer 429 with Discord's body and headers
(``rate_limit``); every answer carries Discord's rate-limit headers (a generous bucket, so
discord.py sends requests side by side as it does against Discord). The gateway speaks zlib-stream
compressed JSON: HELLO, IDENTIFY (a wrong token closes with 4004), READY, heartbeats, and dispatches.

It also plays the people: ``press`` sends the ``INTERACTION_CREATE`` Discord sends for a press on a
button really on a message (its ``custom_id`` as sent), ``submit`` the one for a modal the bot really
opened; ``interaction`` sends any payload (a forged ``custom_id``), ``replay`` one already sent. Every
call fires ``changes``.
"""

from __future__ import annotations

import itertools
import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.events import Changes, until

BOT_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.GabcDE.standin_bot_token_secret_0123456789"
BOT_ID, APP_ID, GUILD, CHANNEL = (
    1100000000000000001,
    1100000000000000002,
    1200000000000000001,
    1300000000000000001,
)
SAM, ANA, EVE = 1400000000000000001, 1400000000000000002, 1400000000000000003
NAMES = {SAM: "sam", ANA: "ana", EVE: "eve"}
BOT = {
    "id": str(BOT_ID),
    "username": "hitl",
    "discriminator": "0",
    "global_name": None,
    "avatar": None,
    "bot": True,
    "flags": 0,
    "public_flags": 0,
}
_ids = itertools.count(1500000000000000001)


def _user(user_id: int) -> dict[str, Any]:
    name = NAMES.get(user_id, f"user{user_id % 1000}")
    return {
        "id": str(user_id),
        "username": name,
        "discriminator": "0",
        "global_name": name.title(),
        "avatar": None,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())


@dataclass
class Message:
    id: int
    channel_id: int
    content: str
    components: list[dict[str, Any]]
    reference: int | None = None
    versions: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)

    def buttons(self) -> list[dict[str, Any]]:
        return [b for row in self.components for b in row["components"]]

    def button(self, label: str) -> dict[str, Any]:
        found = [b for b in self.buttons() if b["label"] == label]
        assert len(found) == 1, f"no single button {label!r} in {[b['label'] for b in self.buttons()]}"
        return found[0]

    def payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "channel_id": str(self.channel_id),
            "guild_id": str(GUILD),
            "author": BOT,
            "content": self.content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 19 if self.reference else 0,
            "flags": 0,
            "components": self.components,
            **({"message_reference": {"message_id": str(self.reference)}} if self.reference else {}),
        }


@dataclass
class Response_:
    """The bot's answer to one interaction (``type``: 4 a message, 7 new buttons, 9 a modal)."""

    interaction: str
    type: int
    data: dict[str, Any]

    @property
    def ephemeral(self) -> bool:
        return self.type == 4 and bool(self.data.get("flags", 0) & 64)


class DiscordStandin:
    def __init__(self, token: str = BOT_TOKEN) -> None:
        self.token = token
        self.changes = Changes()
        self.messages: dict[int, Message] = {}
        self.responses: list[Response_] = []
        self.calls: list[tuple[str, str]] = []
        self.sent: dict[str, dict[str, Any]] = {}  # interaction id -> payload
        self.identified = 0  # IDENTIFYs accepted
        self._limited = 0
        self._sessions: list[MemoryObjectSendStream[tuple[str, dict[str, Any]]]] = []
        self._seq = 0
        api = "/api/v10"
        self.app = _RateLimitHeaders(self)
        self.routes = Starlette(
            routes=[
                Route(f"{api}/users/@me", self._me),
                Route(f"{api}/oauth2/applications/@me", self._application),
                Route(f"{api}/gateway/bot", self._gateway_bot),
                Route(f"{api}/channels/{{channel}}", self._channel),
                Route(f"{api}/channels/{{channel}}/messages", self._create, methods=["POST"]),
                Route(f"{api}/channels/{{channel}}/messages/{{message}}", self._edit, methods=["PATCH"]),
                Route(f"{api}/interactions/{{id}}/{{token}}/callback", self._callback, methods=["POST"]),
                WebSocketRoute("/gateway/", self._gateway),
            ]
        )

    async def until(self, check: Any, seconds: float = 10) -> Any:
        return await until(check, self.changes, seconds)

    def rate_limit(self, times: int = 1) -> None:
        """The next ``times`` REST calls get a 429 (discord.py waits ``retry_after`` and tries again)."""
        self._limited = times

    def in_channel(self, channel: int = CHANNEL) -> list[Message]:
        return [m for m in self.messages.values() if m.channel_id == channel]

    # --- REST ------------------------------------------------------------------------------------

    def _refused(self, request: Request) -> Response | None:
        self.calls.append((request.method, request.url.path))
        self.changes.fire()
        if request.headers.get("authorization") != f"Bot {self.token}":
            return JSONResponse({"message": "401: Unauthorized", "code": 0}, status_code=401)
        if self._limited:
            self._limited -= 1
            return JSONResponse(
                {"message": "You are being rate limited.", "retry_after": 0.05, "global": False},
                status_code=429,
                headers={"Via": "1.1 google", "Retry-After": "1", "X-RateLimit-Scope": "user"},
            )
        return None

    async def _me(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse(BOT)

    async def _application(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse(
            {
                "id": str(APP_ID),
                "name": "hitl",
                "icon": None,
                "description": "",
                "rpc_origins": [],
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": _user(SAM),
                "summary": "",
                "verify_key": "0" * 64,
                "team": None,
                "flags": 0,
                "bot": BOT,
                "interactions_endpoint_url": None,
            }
        )

    async def _gateway_bot(self, request: Request) -> Response:
        url = f"ws://{request.url.netloc}/gateway/"
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return self._refused(request) or JSONResponse({"url": url, "shards": 1, "session_start_limit": limit})

    async def _channel(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        if request.path_params["channel"] != str(CHANNEL):
            return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
        return JSONResponse({"id": str(CHANNEL), "type": 0, "guild_id": str(GUILD), "name": "approvals"})

    def _invalid(self, body: dict[str, Any]) -> str | None:
        if len(body.get("content") or "") > 2000:
            return "content: Must be 2000 or fewer in length."
        rows = body.get("components") or []
        if len(rows) > 5:
            return "components: Must be 5 or fewer in length."
        for row in rows:
            if row.get("type") != 1 or not 1 <= len(row.get("components") or []) <= 5:
                return "components: an action row holds 1 to 5 components"
            for button in row["components"]:
                if len(button.get("label", "")) > 80:
                    return "label: Must be 80 or fewer in length."
                if button.get("style") == 5:
                    if "url" not in button or "custom_id" in button:
                        return "a link button has a url and no custom_id"
                elif not 1 <= len(button.get("custom_id", "")) <= 100:
                    return "custom_id: Must be between 1 and 100 in length."
        return None

    async def _create(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        if request.path_params["channel"] != str(CHANNEL):
            return JSONResponse({"message": "Unknown Channel", "code": 10003}, status_code=404)
        body = await request.json()
        problem = self._invalid(body)
        if problem:
            return JSONResponse(
                {"message": "Invalid Form Body", "code": 50035, "errors": problem}, status_code=400
            )
        reference = body.get("message_reference")
        message = Message(
            next(_ids),
            CHANNEL,
            body.get("content") or "",
            body.get("components") or [],
            int(reference["message_id"]) if reference else None,
        )
        assert body.get("allowed_mentions") == {"parse": []}, body.get("allowed_mentions")
        self.messages[message.id] = message
        self.changes.fire()
        return JSONResponse(message.payload())

    async def _edit(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        message = self.messages.get(int(request.path_params["message"]))
        if message is None:
            return JSONResponse({"message": "Unknown Message", "code": 10008}, status_code=404)
        body = await request.json()
        problem = self._invalid(body)
        if problem:
            return JSONResponse(
                {"message": "Invalid Form Body", "code": 50035, "errors": problem}, status_code=400
            )
        message.versions.append((message.content, message.components))
        message.content = body.get("content", message.content)
        message.components = body.get("components", message.components)
        self.changes.fire()
        return JSONResponse(message.payload())

    async def _callback(self, request: Request) -> Response:
        self.calls.append((request.method, request.url.path))
        interaction_id, token = request.path_params["id"], request.path_params["token"]
        sent = self.sent.get(interaction_id)
        if sent is None or sent["token"] != token:
            return JSONResponse({"message": "Unknown interaction", "code": 10062}, status_code=404)
        if any(r.interaction == interaction_id for r in self.responses):
            return JSONResponse(
                {"message": "Interaction has already been acknowledged.", "code": 40060}, status_code=400
            )
        body = await request.json()
        response = Response_(interaction_id, body["type"], body.get("data") or {})
        if response.type == 7:
            message = self.messages[int(sent["message"]["id"])]
            message.versions.append((message.content, message.components))
            message.components = response.data.get("components", message.components)
        self.responses.append(response)
        self.changes.fire()
        return Response(status_code=204)

    async def response_to(self, interaction: dict[str, Any]) -> Response_:
        found = await self.until(lambda: [r for r in self.responses if r.interaction == interaction["id"]])
        return found[0]  # type: ignore[no-any-return]

    # --- the people ------------------------------------------------------------------------------

    def _interaction(self, kind: int, user: int, message: Message, data: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": str(next(_ids)),
            "application_id": str(APP_ID),
            "type": kind,
            "token": f"interaction-token-{next(_ids)}",
            "version": 1,
            "guild_id": str(GUILD),
            "channel_id": str(message.channel_id),
            "channel": {
                "id": str(message.channel_id),
                "type": 0,
                "guild_id": str(GUILD),
                "name": "approvals",
                "position": 0,
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
                "topic": None,
                "last_message_id": None,
                "rate_limit_per_user": 0,
                "flags": 0,
                "permissions": "2147483647",
            },
            "member": {
                "user": _user(user),
                "roles": [],
                "joined_at": _now(),
                "deaf": False,
                "mute": False,
                "flags": 0,
                "permissions": "2147483647",
                "nick": None,
                "avatar": None,
            },
            "message": message.payload(),
            "data": data,
            "app_permissions": "2147483647",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(GUILD)},
            "context": 0,
            "attachment_size_limit": 8388608,
        }

    async def press(self, message: Message, label: str, user: int) -> dict[str, Any]:
        """A press on a button that is on the message now."""
        button = message.button(label)
        data = {"custom_id": button["custom_id"], "component_type": 2}
        return await self.interaction(self._interaction(3, user, message, data))

    async def submit(self, modal: Response_, message: Message, user: int, value: str) -> dict[str, Any]:
        """The modal the bot opened, submitted with ``value`` in its text input."""
        assert modal.type == 9, modal
        inputs = [c for row in modal.data["components"] for c in row["components"]]
        rows = [{"type": 1, "components": [{"type": 4, "custom_id": inputs[0]["custom_id"], "value": value}]}]
        data = {"custom_id": modal.data["custom_id"], "components": rows}
        return await self.interaction(self._interaction(5, user, message, data))

    async def forge(self, message: Message, custom_id: str, user: int) -> dict[str, Any]:
        data = {"custom_id": custom_id, "component_type": 2}
        return await self.interaction(self._interaction(3, user, message, data))

    async def interaction(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.sent[payload["id"]] = payload
        await self.dispatch("INTERACTION_CREATE", payload)
        return payload

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        assert self._sessions, "no gateway session: is the bot connected?"
        for session in list(self._sessions):
            await session.send((event, data))

    async def connected(self) -> None:
        await self.until(lambda: self._sessions)

    # --- the gateway -----------------------------------------------------------------------------

    async def _gateway(self, ws: WebSocket) -> None:
        await ws.accept()
        compress = zlib.compressobj() if ws.query_params.get("compress") == "zlib-stream" else None

        async def send(payload: dict[str, Any]) -> None:
            raw = json.dumps(payload)
            if compress is None:
                await ws.send_text(raw)
            else:
                await ws.send_bytes(compress.compress(raw.encode()) + compress.flush(zlib.Z_SYNC_FLUSH))

        await send({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
        outbox, inbox = anyio.create_memory_object_stream[tuple[str, dict[str, Any]]](100)

        async def forward() -> None:
            async for event, data in inbox:
                self._seq += 1
                await send({"op": 0, "t": event, "s": self._seq, "d": data})

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(forward)
                await self._read(ws, send, outbox)
                tg.cancel_scope.cancel()
        finally:
            if outbox in self._sessions:
                self._sessions.remove(outbox)
            outbox.close()
            self.changes.fire()

    async def _read(self, ws: WebSocket, send: Any, outbox: Any) -> None:
        try:
            while True:
                message = json.loads(await ws.receive_text())
                if message["op"] == 1:
                    await send({"op": 11, "d": None, "s": None, "t": None})
                elif message["op"] == 2:
                    if message["d"]["token"] != self.token:
                        await ws.close(4004, "Authentication failed.")
                        return
                    self.identified += 1
                    self._seq += 1
                    ready = {
                        "v": 10,
                        "user": BOT,
                        "guilds": [],
                        "session_id": f"session-{self.identified}",
                        "resume_gateway_url": f"ws://{ws.url.netloc}/gateway/",
                        "application": {"id": str(APP_ID), "flags": 0},
                        "shard": [0, 1],
                    }
                    await send({"op": 0, "t": "READY", "s": self._seq, "d": ready})
                    self._sessions.append(outbox)
                    self.changes.fire()
        except WebSocketDisconnect:
            return


class _RateLimitHeaders:
    """The stand-in's app, with Discord's ``X-RateLimit-*`` headers on every REST answer: without
    them discord.py takes a bucket to allow one request at a time."""

    def __init__(self, stand: DiscordStandin) -> None:
        self.stand = stand

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] != 429:
                reset = time.time() + 1
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-ratelimit-limit", b"10000"),
                    (b"x-ratelimit-remaining", b"9999"),
                    (b"x-ratelimit-reset", f"{reset:.3f}".encode()),
                    (b"x-ratelimit-reset-after", b"1.000"),
                    (b"x-ratelimit-bucket", b"standin-bucket"),
                ]
            await send(message)

        await self.stand.routes(scope, receive, with_headers if scope["type"] == "http" else send)
