"""Mattermost: the inbound side. Button presses come as POSTs from the Mattermost server to the action
URL (their context signed by hitl-mcp, each ``trigger_id`` taken once); thread replies and reactions
come over the WebSocket (no inbound URL at all), and after each (re)connection the threads and
reactions of open requests are read again over REST, so nothing said while it was down is lost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels._replies import choice_by_number, decision_of
from hitl_mcp.channels.base import Answered, ChannelConfig, Counted, DeliveryError, Hub, Unknown, allowed
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.fitting import approve_here, shown
from hitl_mcp.channels.mattermost.api import call, new_client
from hitl_mcp.channels.mattermost.config import HTTP_TIMEOUT, MAX_BODY, SOCKET_RETRY, Config, log
from hitl_mcp.channels.mattermost.render import (
    APPROVE,
    APPROVE_EMOJI,
    BACK,
    CONFIRM,
    DENY,
    DENY_EMOJI,
    DIGITS,
    ActionTokens,
    attachments,
    compose,
)
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.kit.net import read_within
from hitl_mcp.kit.signing import derive_key

ACTION_PATH = "/action"
HIGH_RISK = "Not recorded: approve a high-risk action with its button, or in the hitl-mcp inbox."


class MattermostInbound(BaseChannel):
    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        self._client: httpx2.AsyncClient | None = None
        self._bot_id: str | None = None
        self._names: dict[str, str] = {}

    @property
    def tokens(self) -> ActionTokens:
        return ActionTokens(
            derive_key(self.config.bot_token.get_secret_value(), "hitl-mcp mattermost actions")
        )

    @property
    def actions_url(self) -> str | None:
        base = self.config.actions_url or self.public_url
        return f"{base.rstrip('/')}/webhooks/{self.name}{ACTION_PATH}" if base else None

    def _attachments(self, request: Request, confirming: bool = False) -> list[dict[str, Any]]:
        inbox = f"{self.public_url.rstrip('/')}/requests/{request.id}" if self.public_url else None
        approve = approve_here(self, request) is None
        return attachments(
            request, self.tokens, self.actions_url, confirming=confirming, approve=approve, inbox=inbox
        )

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = new_client(self.config)
        return self._client

    # --- buttons: the Mattermost server POSTs each press --------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route(ACTION_PATH, self._action, methods=["POST"])] if self.actions_url else []

    async def _action(self, http: HttpRequest) -> Response:
        body = await read_within(http.stream(), MAX_BODY)
        if body is None:
            return JSONResponse({"error": "body too large"}, status_code=413)
        try:
            press = json.loads(body)
            assert isinstance(press, dict)
        except (ValueError, AssertionError):
            return JSONResponse({"error": "expected a Mattermost action request (JSON)"}, status_code=400)
        user_id = str(press.get("user_id") or "")
        who = f"@{press['user_name']} ({user_id})" if press.get("user_name") else user_id
        parsed = self.tokens.read(press.get("context"))
        if parsed is None or not press.get("trigger_id"):
            await self.ignore(None, who or None, "a button hitl-mcp did not sign", user_id=user_id)
            return JSONResponse({"ephemeral_text": "This button is not valid."}, status_code=403)
        if await self.state.seen(f"action:{press['trigger_id']}"):
            return JSONResponse({"ephemeral_text": "This press was handled already."}, status_code=409)
        request_id, action = parsed
        if not allowed(user_id, self.config.answerers):
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request_id, who or None, reason, user_id=user_id)
            return JSONResponse({"ephemeral_text": "You are not allowed to answer this request."})
        request = await self.hub.get(request_id)
        if request is None:
            return JSONResponse({"ephemeral_text": Unknown(request_id).words})
        if request.is_open and request.kind == Kind.APPROVAL and action in (APPROVE, BACK):
            if action == BACK or (request.risk == "high" and not request.step_up):
                message = compose(request, self.public_url, preview=shown(self, request))
                props = {"attachments": self._attachments(request, confirming=action == APPROVE)}
                return JSONResponse({"update": {"message": message, "props": props}})
        fields = _button_fields(request, action)
        if fields is None:
            await self.ignore(request_id, who, f"a button that does not fit the request ({action})")
            return JSONResponse({"ephemeral_text": "This button does not fit the request."})
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=who, identity=user_id, **fields)
        )
        return JSONResponse({"ephemeral_text": outcome.words})

    # --- thread replies and reactions: the WebSocket -----------------------------------------------

    async def _socket_forever(self) -> None:
        import websockets

        token = self.config.bot_token.get_secret_value()
        attempt = 0
        while True:
            try:
                async with websockets.connect(
                    self.config.websocket_url,
                    additional_headers={"Authorization": f"Bearer {token}"},
                    open_timeout=HTTP_TIMEOUT,
                ) as socket:
                    attempt = 0
                    log.info("mattermost %s: connected to %s", self.name, self.config.websocket_url)
                    await self._catch_up()
                    async for raw in socket:
                        await self._on_event(raw)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                refused = isinstance(exc, websockets.InvalidStatus) and exc.response.status_code == 401
                why = "Mattermost refused the bot_token" if refused else type(exc).__name__
                (log.error if refused else log.warning)(
                    "mattermost %s: WebSocket: %s; again in %.0fs",
                    self.name,
                    why,
                    SOCKET_RETRY.delay(attempt + 1),
                )
            attempt += 1
            await asyncio.sleep(SOCKET_RETRY.delay(attempt))

    async def _catch_up(self) -> None:
        """Replies and reactions made while the socket was down: each is taken once (``seen``)."""
        for request, delivery in await self.open_requests():
            post_id = delivery.ref
            if not post_id or request.kind == Kind.NOTIFICATION:
                continue
            try:
                thread = await call(self._http(), "GET", f"/posts/{post_id}/thread", self.config)
                reactions = await call(self._http(), "GET", f"/posts/{post_id}/reactions", self.config)
            except DeliveryError as exc:
                log.warning("mattermost %s: catching up on %s: %s", self.name, request.id, exc)
                continue
            posts = (thread or {}).get("posts") or {}
            for key in (thread or {}).get("order") or []:
                if key in posts:
                    await self._on_post(posts[key])
            for reaction in reactions or []:
                await self._on_reaction(reaction)

    async def _on_event(self, raw: str | bytes) -> None:
        try:
            event = json.loads(raw)
            data = event.get("data") or {}
            if event.get("event") == "posted" and "post" in data:
                await self._on_post(json.loads(data["post"]))
            elif event.get("event") == "reaction_added" and "reaction" in data:
                await self._on_reaction(json.loads(data["reaction"]))
        except Exception:
            log.exception("mattermost %s: could not handle a WebSocket event", self.name)

    async def _on_post(self, post: dict[str, Any]) -> None:
        user_id, root = str(post.get("user_id") or ""), post.get("root_id")
        if not root or post.get("type") or user_id in ("", self._bot_id):
            return  # a new thread, a system message, the bot's own
        if await self.state.seen(f"post:{post.get('id')}"):
            return
        request = await self.find_by_ref(root)
        if request is None or request.kind == Kind.NOTIFICATION:
            return
        text = str(post.get("message") or "").strip()
        fields: dict[str, Any] | None
        if request.kind == Kind.APPROVAL:
            decision = decision_of(text.split()[0]) if text else None
            fields = {"decision": decision} if decision else None
        else:
            choice = choice_by_number(text, request.choices)
            fields = {"choice": choice} if choice is not None else {"text": text}
        await self._take(request, user_id, fields, root, "a reply that is not yes or no")

    async def _on_reaction(self, reaction: dict[str, Any]) -> None:
        user_id, post_id, emoji = (str(reaction.get(k) or "") for k in ("user_id", "post_id", "emoji_name"))
        if not post_id or user_id in ("", self._bot_id):
            return
        request = await self.find_by_ref(post_id)
        if request is None or request.kind == Kind.NOTIFICATION:
            return
        fields: dict[str, Any] | None = None
        if request.kind == Kind.APPROVAL and emoji in APPROVE_EMOJI | DENY_EMOJI:
            fields = {"decision": "approve" if emoji in APPROVE_EMOJI else "deny"}
        elif request.kind == Kind.QUESTION and emoji in DIGITS:
            choice = choice_by_number(str(DIGITS.index(emoji) + 1), request.choices)
            fields = {"choice": choice} if choice is not None else None
        if fields is None:
            return  # 👀 and the like: a reaction that answers nothing
        if await self.state.seen(f"reaction:{post_id}:{user_id}:{emoji}"):
            return
        await self._take(request, user_id, fields, post_id, "")

    async def _take(
        self, request: Request, user_id: str, fields: dict[str, Any] | None, root: str, unclear: str
    ) -> None:
        who = await self._name(user_id)
        if not allowed(user_id, self.config.answerers):
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request.id, who, reason, user_id=user_id)
            return
        if fields is None:
            await self.ignore(request.id, who, unclear)
            await self._reply(root, "Not recorded: react ✅ or ❌, or reply “yes” or “no”.")
            return
        if fields.get("decision") == "approve" and request.risk == "high" and request.is_open:
            await self.ignore(request.id, who, "a high-risk approval without its button")
            await self._reply(root, HIGH_RISK)
            return
        outcome = await self.answer(
            request.id, Reply(channel=self.name, responder=who, identity=user_id, **fields)
        )
        # the post itself shows the outcome once it is settled; anything else is said in the thread
        if not isinstance(outcome, Answered) or isinstance(outcome, Counted):
            await self._reply(root, outcome.words)

    async def _name(self, user_id: str) -> str:
        """``@username (id)``, looked up once; the id alone when the lookup fails."""
        if user_id not in self._names:
            try:
                user = await call(self._http(), "GET", f"/users/{user_id}", self.config)
                self._names[user_id] = f"@{user['username']} ({user_id})"
            except (DeliveryError, KeyError, TypeError):
                return user_id
        return self._names[user_id]

    async def _reply(self, root: str, text: str) -> None:
        post = {"channel_id": self.config.channel_id, "root_id": root, "message": text}
        try:
            await call(self._http(), "POST", "/posts", self.config, post, self.config.channel_id)
        except DeliveryError as exc:
            log.warning("mattermost %s: %s", self.name, exc)


def _button_fields(request: Request, action: str) -> dict[str, Any] | None:
    if action in (APPROVE, CONFIRM):
        return {"decision": "approve"}
    if action == DENY:
        return {"decision": "deny"}
    if action.isdigit() and int(action) < len(request.choices or []):
        return {"choice": (request.choices or [])[int(action)]}
    return None
