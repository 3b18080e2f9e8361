"""A local Mattermost: the REST API v4 routes hitl-mcp calls and the WebSocket, in Mattermost's wire
format, so the channel's own httpx2 and websockets clients talk to it through ``url``.

REST wants ``Authorization: Bearer <token>`` (401 otherwise); the WebSocket refuses a wrong token at the
handshake, then sends ``hello`` and events whose ``data.post`` / ``data.reaction`` are JSON strings, as
Mattermost's are. Posts are returned without their actions' integrations (Mattermost keeps those from
clients: only the server knows a button's URL and context).

It also plays the people: ``press`` does what the Mattermost server does when someone presses a
button (POSTs the action request, with the context it kept, to the integration URL, and applies the
``update`` it gets back); ``react`` and ``reply`` add a reaction or a thread reply and send their
WebSocket events (``quietly``: while no socket listens). Every call fires ``changes``.
"""

from __future__ import annotations

import copy
import itertools
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectSendStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.events import Changes, until

TOKEN = "mmbottokenstandin0123456789"
BOT_ID = "b" * 26
CHANNEL = "c" * 26
SAM, ANA, EVE = "s" * 26, "a" * 26, "e" * 26
NAMES = {SAM: "sam", ANA: "ana", EVE: "eve", BOT_ID: "hitl"}
_ids = itertools.count(1)


def _id() -> str:
    return f"p{next(_ids):025d}"


@dataclass
class Post:
    id: str
    user_id: str
    message: str
    props: dict[str, Any]
    root_id: str = ""
    versions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def actions(self) -> list[dict[str, Any]]:
        return [a for att in self.props.get("attachments") or [] for a in att.get("actions") or []]

    def action(self, name: str) -> dict[str, Any]:
        found = [a for a in self.actions() if a["name"] == name]
        assert len(found) == 1, f"no single button {name!r} in {[a['name'] for a in self.actions()]}"
        return found[0]

    def payload(self) -> dict[str, Any]:
        """As clients get it: the actions without their integration."""
        props = copy.deepcopy(self.props)
        for att in props.get("attachments") or []:
            for action in att.get("actions") or []:
                action.pop("integration", None)
        return {
            "id": self.id,
            "create_at": int(time.time() * 1000),
            "update_at": int(time.time() * 1000),
            "user_id": self.user_id,
            "channel_id": CHANNEL,
            "root_id": self.root_id,
            "message": self.message,
            "type": "",
            "props": props,
        }


class MattermostStandin:
    def __init__(self) -> None:
        self.changes = Changes()
        self.posts: dict[str, Post] = {}
        self.reactions: list[dict[str, Any]] = []
        self._sockets: list[MemoryObjectSendStream[dict[str, Any]]] = []
        self.connections = 0
        api = "/api/v4"
        self.app = Starlette(
            routes=[
                Route(f"{api}/users/me", self._me),
                Route(f"{api}/users/{{user}}", self._user),
                Route(f"{api}/channels/{{channel}}", self._channel),
                Route(f"{api}/posts", self._create, methods=["POST"]),
                Route(f"{api}/posts/{{post}}/patch", self._patch, methods=["PUT"]),
                Route(f"{api}/posts/{{post}}/thread", self._thread),
                Route(f"{api}/posts/{{post}}/reactions", self._reactions),
                WebSocketRoute(f"{api}/websocket", self._socket),
            ]
        )

    async def until(self, check: Any, seconds: float = 10) -> Any:
        return await until(check, self.changes, seconds)

    def replies_to(self, post: Post) -> list[Post]:
        return [p for p in self.posts.values() if p.root_id == post.id and p.user_id == BOT_ID]

    # --- REST ------------------------------------------------------------------------------------

    def _refused(self, request: Request) -> Response | None:
        self.changes.fire()
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse(
                {
                    "id": "api.context.session_expired.app_error",
                    "message": "Invalid or expired session, please login again.",
                    "status_code": 401,
                },
                status_code=401,
            )
        return None

    async def _me(self, request: Request) -> Response:
        return self._refused(request) or JSONResponse({"id": BOT_ID, "username": "hitl", "is_bot": True})

    async def _user(self, request: Request) -> Response:
        user = request.path_params["user"]
        if user not in NAMES:
            return JSONResponse({"message": "Unable to find the user.", "status_code": 404}, status_code=404)
        return self._refused(request) or JSONResponse({"id": user, "username": NAMES[user]})

    async def _channel(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        if request.path_params["channel"] != CHANNEL:
            return JSONResponse(
                {"message": "Unable to find the channel.", "status_code": 404}, status_code=404
            )
        return JSONResponse({"id": CHANNEL, "name": "approvals", "display_name": "Approvals"})

    async def _create(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        body = await request.json()
        if body.get("channel_id") != CHANNEL:
            return JSONResponse(
                {"message": "Unable to find the channel.", "status_code": 404}, status_code=404
            )
        if len(body.get("message", "")) > 16383:
            return JSONResponse({"message": "Message too long", "status_code": 400}, status_code=400)
        post = Post(
            _id(), BOT_ID, body.get("message", ""), body.get("props") or {}, body.get("root_id") or ""
        )
        self.posts[post.id] = post
        await self._event(
            "posted", {"post": json.dumps(post.payload()), "sender_name": "@hitl"}, quietly=True
        )
        return JSONResponse(post.payload(), status_code=201)

    async def _patch(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        post = self.posts.get(request.path_params["post"])
        if post is None:
            return JSONResponse({"message": "Unable to find the post.", "status_code": 404}, status_code=404)
        body = await request.json()
        post.versions.append((post.message, post.props))
        post.message = body.get("message", post.message)
        post.props = body.get("props", post.props)
        self.changes.fire()
        return JSONResponse(post.payload())

    async def _thread(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        root = request.path_params["post"]
        posts = {p.id: p.payload() for p in self.posts.values() if root in (p.id, p.root_id)}
        return JSONResponse({"order": list(posts), "posts": posts})

    async def _reactions(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused:
            return refused
        return JSONResponse([r for r in self.reactions if r["post_id"] == request.path_params["post"]])

    # --- the WebSocket ---------------------------------------------------------------------------

    async def _socket(self, ws: WebSocket) -> None:
        if ws.headers.get("authorization") != f"Bearer {TOKEN}":
            await ws.close(code=1008)  # refused at the handshake: 403
            return
        await ws.accept()
        outbox, inbox = anyio.create_memory_object_stream[dict[str, Any]](100)
        self._sockets.append(outbox)
        self.connections += 1
        self.changes.fire()
        seq = itertools.count()
        await ws.send_text(
            json.dumps({"event": "hello", "data": {"server_version": "10.5.0"}, "seq": next(seq)})
        )

        async def drain() -> None:
            try:
                while True:
                    await ws.receive_text()
            except WebSocketDisconnect:
                tg.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                async for event in inbox:
                    await ws.send_text(json.dumps({**event, "seq": next(seq)}))
                tg.cancel_scope.cancel()  # dropped
        finally:
            self._sockets.remove(outbox)
            self.changes.fire()

    async def _event(self, name: str, data: dict[str, Any], quietly: bool = False) -> None:
        event = {"event": name, "data": data, "broadcast": {"channel_id": CHANNEL}}
        assert quietly or self._sockets, "no WebSocket: is the channel connected?"
        for socket in list(self._sockets):
            await socket.send(event)
        self.changes.fire()

    async def connected(self) -> None:
        await self.until(lambda: self._sockets)

    def drop(self) -> None:
        """Close every WebSocket (the server restarting)."""
        for socket in list(self._sockets):
            socket.close()

    # --- the people ------------------------------------------------------------------------------

    async def react(self, post: Post, emoji: str, user: str, quietly: bool = False) -> dict[str, Any]:
        reaction = {
            "user_id": user,
            "post_id": post.id,
            "emoji_name": emoji,
            "create_at": int(time.time() * 1000),
        }
        self.reactions.append(reaction)
        await self._event("reaction_added", {"reaction": json.dumps(reaction)}, quietly)
        return reaction

    async def reply(self, post: Post, text: str, user: str, quietly: bool = False) -> Post:
        reply = Post(_id(), user, text, {}, post.id)
        self.posts[reply.id] = reply
        await self._event(
            "posted", {"post": json.dumps(reply.payload()), "sender_name": f"@{NAMES[user]}"}, quietly
        )
        return reply

    async def press(self, post: Post, name: str, user: str, **override: Any) -> tuple[int, dict[str, Any]]:
        """What the server does for a press: the action request to the integration URL."""
        integration = post.action(name)["integration"]
        body = {
            "user_id": user,
            "user_name": NAMES[user],
            "channel_id": CHANNEL,
            "channel_name": "approvals",
            "team_id": "t" * 26,
            "team_domain": "team",
            "post_id": post.id,
            "trigger_id": secrets.token_hex(16),
            "type": "",
            "data_source": "",
            "context": integration["context"],
            **override,
        }
        return await self.post_action(integration["url"], body, post)

    async def post_action(
        self, url: str, body: dict[str, Any], post: Post | None = None
    ) -> tuple[int, dict[str, Any]]:
        async with httpx2.AsyncClient() as http:
            response = await http.post(url, json=body)
        answer = response.json() if response.content else {}
        update = answer.get("update") if response.status_code == 200 else None
        if post is not None and update:
            post.versions.append((post.message, post.props))
            post.message = update.get("message") or post.message
            post.props = update.get("props", post.props)
        self.changes.fire()
        return response.status_code, answer
