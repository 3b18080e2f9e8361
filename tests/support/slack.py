"""A local Slack: the Web API methods hitl-mcp calls, and a Socket Mode WebSocket, in Slack's wire format.

The real ``slack_sdk`` clients talk to it through ``api_base_url``. It keeps what it was sent
(messages, updates, ephemeral notes, acks) and fires ``changes`` at every change, so tests await
conditions instead of sleeping: ``await until(lambda: stand.messages, stand.changes)``. It also plays
the person: ``click``/``type_text``/``thread_reply`` build the payloads Slack would send (block_actions,
message events with ``thread_ts``) from the blocks that were really posted, so a test can only press a
button that exists.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.events import Changes, until
from tests.support.serve import serving as serve

BOT_TOKEN = "xoxb-standin-0000-bot-token-secret"
APP_TOKEN = "xapp-1-standin-0000-app-token-secret"
SIGNING_SECRET = "standin-signing-secret-0123456789"
TEAM_ID = "T0STANDIN"
BOT_USER = "U0HITLBOT"
CHANNEL = "C0OPS"
NOT_MEMBER = "C0ELSEWHERE"  # exists, but the bot was never invited
USERS = {"U0SAM": "sam", "U0ANA": "ana", "U0EVE": "eve"}


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    versions: list[dict[str, Any]] = field(default_factory=list)  # earlier (text, blocks)
    thread_ts: str | None = None  # a reply in the thread of the message with this ts

    def block_ids(self) -> list[str]:
        return [b.get("block_id", "") for b in self.blocks]

    def all_text(self) -> str:
        """Every string in the message (the fallback text, then the blocks'), one per line."""
        found: list[str] = [self.text]

        def walk(value: Any) -> None:
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)

        walk(self.blocks)
        return "\n".join(found)


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    token: str | None


class SlackStandin:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.messages: list[Message] = []
        self.ephemerals: list[dict[str, Any]] = []
        self.acks: list[str] = []
        self.connections = 0  # Socket Mode connections accepted so far
        self.rate_limits: dict[str, list[int]] = {}  # method -> Retry-After values for its next calls
        self.errors: dict[str, list[str]] = {}  # method -> error codes for its next calls
        self.gates: dict[str, anyio.Event] = {}  # method -> answered only once this is set
        self._socket: WebSocket | None = None
        self._ts = itertools.count(1)
        self._ids = itertools.count(1)
        self.changes = Changes()  # fires at every call, answer, ack and (dis)connection

    # --- what tests look at ---------------------------------------------------------------------

    def called(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def message(self, channel: str, ts: str) -> Message:
        return next(m for m in self.messages if (m.channel, m.ts) == (channel, ts))

    # --- the Web API ----------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/{method}", self._api, methods=["POST", "GET"]),
                WebSocketRoute("/link/", self._link),
            ]
        )

    async def _api(self, request: Request) -> Response:
        method = request.path_params["method"]
        args: dict[str, Any] = dict(request.query_params)
        raw = await request.body()
        if request.headers.get("content-type", "").startswith("application/json"):
            args.update(json.loads(raw or b"{}"))
        elif raw:
            args.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else args.pop("token", None)
        self.calls.append(Call(method, args, token))
        self.changes.fire()
        gate = self.gates.get(method)
        if gate is not None:
            await gate.wait()
        if self.rate_limits.get(method):
            wait = self.rate_limits[method].pop(0)
            return JSONResponse(
                {"ok": False, "error": "ratelimited"}, 429, headers={"Retry-After": str(wait)}
            )
        if self.errors.get(method):
            code = self.errors[method].pop(0)
            extra = {"needed": "chat:write", "provided": "users:read"} if code == "missing_scope" else {}
            return JSONResponse({"ok": False, "error": code, **extra})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return JSONResponse({"ok": False, "error": "unknown_method"}, 404)
        if method == "apps.connections.open":
            if token != APP_TOKEN:
                error = "not_allowed_token_type" if token == BOT_TOKEN else "invalid_auth"
                return JSONResponse({"ok": False, "error": error})
        elif token != BOT_TOKEN:
            error = "not_allowed_token_type" if token == APP_TOKEN else "invalid_auth"
            return JSONResponse({"ok": False, "error": error})
        body = handler(request, args)
        self.changes.fire()
        return JSONResponse(body)

    def _auth_test(self, request: Request, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://standin.slack.com/",
            "team": "Stand-in",
            "user": "hitl",
            "team_id": TEAM_ID,
            "user_id": BOT_USER,
            "bot_id": "B0HITL",
        }

    def _channel_error(self, channel: str | None) -> dict[str, Any] | None:
        if channel == NOT_MEMBER:
            return {"ok": False, "error": "not_in_channel"}
        if channel != CHANNEL and not (channel or "").startswith("D"):
            return {"ok": False, "error": "channel_not_found"}
        return None

    def _chat_postMessage(self, request: Request, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        if error := self._channel_error(channel):
            return error
        blocks = args.get("blocks") or []
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if not args.get("text") and not blocks:
            return {"ok": False, "error": "no_text"}
        if problem := check_blocks(blocks):
            return {"ok": False, "error": "invalid_blocks", "errors": [problem]}
        n = next(self._ts)
        message = Message(str(channel), f"{1700000000 + n}.{n:06d}", args.get("text", ""), blocks)
        message.thread_ts = args.get("thread_ts") or None
        self.messages.append(message)
        return {
            "ok": True,
            "channel": channel,
            "ts": message.ts,
            "message": {"type": "message", "user": BOT_USER, "bot_id": "B0HITL", "text": message.text},
        }

    def _chat_update(self, request: Request, args: dict[str, Any]) -> dict[str, Any]:
        found = [m for m in self.messages if (m.channel, m.ts) == (args.get("channel"), args.get("ts"))]
        if not found:
            return {"ok": False, "error": "message_not_found"}
        blocks = args.get("blocks") or []
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if problem := check_blocks(blocks):
            return {"ok": False, "error": "invalid_blocks", "errors": [problem]}
        message = found[0]
        message.versions.append({"text": message.text, "blocks": message.blocks})
        message.text, message.blocks = args.get("text", ""), blocks
        return {"ok": True, "channel": message.channel, "ts": message.ts, "text": message.text}

    def _chat_postEphemeral(self, request: Request, args: dict[str, Any]) -> dict[str, Any]:
        if error := self._channel_error(args.get("channel")):
            return error
        if args.get("user") not in USERS:
            return {"ok": False, "error": "user_not_in_channel"}
        self.ephemerals.append(args)
        return {"ok": True, "message_ts": f"{time.time():.6f}"}

    def _conversations_open(self, request: Request, args: dict[str, Any]) -> dict[str, Any]:
        user = str(args.get("users", ""))
        if user not in USERS:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "channel": {"id": "D" + user[1:]}}

    def _apps_connections_open(self, request: Request, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://{request.url.netloc}/link/?ticket=t-{next(self._ids)}"}

    # --- Socket Mode --------------------------------------------------------------------------

    async def _link(self, ws: WebSocket) -> None:
        if not ws.query_params.get("ticket", "").startswith("t-"):
            await ws.close(code=4001)
            return
        await ws.accept()
        self._socket = ws
        self.connections += 1
        hello = {
            "type": "hello",
            "num_connections": 1,
            "debug_info": {"host": "standin", "approximate_connection_time": 18060},
            "connection_info": {"app_id": "A0HITL"},
        }
        await ws.send_text(json.dumps(hello))
        self.changes.fire()
        try:
            while True:
                data = json.loads(await ws.receive_text())
                if "envelope_id" in data:
                    self.acks.append(data["envelope_id"])
                    self.changes.fire()
        except WebSocketDisconnect:
            pass
        finally:
            if self._socket is ws:
                self._socket = None
            self.changes.fire()

    async def push(self, kind: str, payload: dict[str, Any], retry_attempt: int = 0) -> str:
        """Send an envelope (``interactive`` or ``events_api``) over the live socket; its id."""
        socket = await until(lambda: self._socket, self.changes)
        envelope_id = f"env-{next(self._ids)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind == "interactive",
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }
        await socket.send_text(json.dumps(envelope))
        return envelope_id

    async def drop(self) -> None:
        """Close the live connection, as Slack does when it recycles a socket."""
        socket = await until(lambda: self._socket, self.changes)
        self._socket = None
        await socket.close(code=1001)

    # --- playing the person ---------------------------------------------------------------------

    def click(self, message: Message, user: str, action_id: str) -> dict[str, Any]:
        """A block_actions payload for pressing the button ``action_id`` in ``message``."""
        for block in message.blocks:
            for element in block.get("elements", []):
                if element.get("type") == "button" and element.get("action_id") == action_id:
                    action = {
                        "type": "button",
                        "action_id": action_id,
                        "block_id": block["block_id"],
                        "text": element["text"],
                        "value": element.get("value"),
                        "action_ts": f"{time.time():.6f}",
                    }
                    if "style" in element:
                        action["style"] = element["style"]
                    return self._block_actions(message, user, action, {})
        raise AssertionError(f"no button {action_id!r} in the message: {message.blocks}")

    def type_text(self, message: Message, user: str, text: str) -> dict[str, Any]:
        """The block_actions payload of an input with dispatch_action when Enter is pressed."""
        for block in message.blocks:
            element = block.get("element") or {}
            if block.get("type") == "input" and block.get("dispatch_action"):
                triggers = element.get("dispatch_action_config", {}).get("trigger_actions_on", [])
                assert "on_enter_pressed" in triggers, block
                action = {
                    "type": "plain_text_input",
                    "action_id": element["action_id"],
                    "block_id": block["block_id"],
                    "value": text,
                    "action_ts": f"{time.time():.6f}",
                }
                state = {
                    block["block_id"]: {element["action_id"]: {"type": "plain_text_input", "value": text}}
                }
                return self._block_actions(message, user, action, state)
        raise AssertionError(f"no input with dispatch_action in the message: {message.blocks}")

    def _block_actions(
        self, message: Message, user: str, action: dict[str, Any], state: dict[str, Any]
    ) -> dict[str, Any]:
        n = next(self._ids)
        return {
            "type": "block_actions",
            "user": {"id": user, "username": USERS[user], "name": USERS[user], "team_id": TEAM_ID},
            "api_app_id": "A0HITL",
            "token": "deprecated-verification-token",
            "container": {
                "type": "message",
                "message_ts": message.ts,
                "channel_id": message.channel,
                "is_ephemeral": False,
            },
            "trigger_id": f"{n}.{n * 7}.abcdef",
            "team": {"id": TEAM_ID, "domain": "standin"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": message.channel, "name": "ops"},
            "message": {"type": "message", "ts": message.ts, "text": message.text, "blocks": message.blocks},
            "state": {"values": state},
            "response_url": "https://hooks.slack.invalid/actions/T0STANDIN/1/abc",
            "actions": [action],
        }

    def thread_reply(self, message: Message, user: str, text: str) -> dict[str, Any]:
        """The Events API ``event_callback`` for ``user`` replying ``text`` in ``message``'s thread."""
        n = next(self._ts)
        ts = f"{1700000000 + n}.{n:06d}"
        return {
            "token": "deprecated-verification-token",
            "team_id": TEAM_ID,
            "api_app_id": "A0HITL",
            "event": {
                "type": "message",
                "channel": message.channel,
                "user": user,
                "text": text,
                "ts": ts,
                "thread_ts": message.ts,
                "parent_user_id": BOT_USER,
                "event_ts": ts,
                "channel_type": "im" if message.channel.startswith("D") else "channel",
            },
            "type": "event_callback",
            "event_id": f"Ev{n:08d}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER, "is_bot": True}],
            "is_ext_shared_channel": False,
        }


def check_blocks(blocks: list[dict[str, Any]]) -> str | None:
    """The Block Kit limits hitl-mcp must keep; what is wrong, or None."""
    if len(blocks) > 50:
        return "more than 50 blocks"
    block_ids = [b["block_id"] for b in blocks if "block_id" in b]
    if len(block_ids) != len(set(block_ids)):
        return "duplicate block_id"
    for block in blocks:
        kind = block.get("type")
        text = (block.get("text") or {}).get("text", "")
        if kind == "header" and len(text) > 150:
            return "header text over 150 characters"
        if kind == "section" and not 1 <= len(text) <= 3000:
            return "section text must be 1 to 3000 characters"
        if kind == "actions":
            elements = block.get("elements", [])
            if not 1 <= len(elements) <= 25:
                return "actions take 1 to 25 elements"
            ids = [e.get("action_id") for e in elements]
            if len(ids) != len(set(ids)):
                return "duplicate action_id"
            for e in elements:
                if len(e["text"]["text"]) > 75 or len(e.get("value", "")) > 2000:
                    return "button text over 75 or value over 2000 characters"
        if kind == "input" and not block.get("element", {}).get("action_id"):
            return "input without an action_id"
    return None


def sign(body: bytes, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """The headers Slack sends with a request: ``v0=`` HMAC-SHA256 of ``v0:{ts}:{body}``."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[SlackStandin, str]]:
    """The stand-in on 127.0.0.1 (uvicorn, in this event loop); yields it and its API base URL."""
    standin = SlackStandin()
    async with serve(standin.app(), ws="websockets-sansio") as url:
        yield standin, f"{url}/api/"
