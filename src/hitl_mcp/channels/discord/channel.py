"""Discord: the channel (its lifecycle, sending, reminding and retracting); answers are read in
``inbound.py``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import anyio

from hitl_mcp.channels.base import Delivery, DeliveryError
from hitl_mcp.channels.discord.api import NO_MENTIONS, call, open_http, require_library, route
from hitl_mcp.channels.discord.config import Config, log
from hitl_mcp.channels.discord.inbound import DiscordInbound
from hitl_mcp.channels.discord.render import ROOM, compose, outcome_line, reminder
from hitl_mcp.channels.fitting import Room, shown
from hitl_mcp.core.models import Kind, Request

_MESSAGES = "/channels/{channel_id}/messages"
_MESSAGE = "/channels/{channel_id}/messages/{message_id}"


class DiscordChannel(DiscordInbound):
    type = "discord"
    extra: ClassVar[str | None] = "discord"
    config: Config

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("discord", "aiohttp")

    def preview_room(self) -> Room:
        return ROOM

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        require_library()
        self._http = await open_http(self.config)
        if not self.config.answerers:
            log.warning("discord %s: allowed_users is empty: nobody may answer", self.name)
        # one gateway connection among the processes sharing the store (replicas)
        self.in_background(self._gateway_forever, exclusive=True)

    async def close(self) -> None:
        await self.stop_background()
        http, self._http = self._http, None
        if http is not None:
            with anyio.CancelScope(shield=True):
                await http.close()

    async def check(self) -> str:
        async with self._rest() as http:
            me = await call(http.get_user("@me"), "GET /users/@me", self.config)
            where = str(self.config.channel_id)
            channel = await call(http.get_channel(where), "GET /channels", self.config, where)
        name = channel.get("name", where)
        bot = f"@{me.get('username')} ({me.get('id')})"
        parts = [f"ok: bot {bot} posts to #{name} ({where}); answers over the gateway"]
        if not self.config.answerers:
            parts.append("warning: allowed_users is empty: nobody may answer")
        return "; ".join(parts)

    @contextlib.asynccontextmanager
    async def _rest(self) -> AsyncIterator[Any]:
        """The started channel's HTTP client, or one for this call only (``check``, ``test-channel``)."""
        if self._http is not None:
            yield self._http
            return
        http = await open_http(self.config)
        try:
            yield http
        finally:
            with anyio.CancelScope(shield=True):
                await http.close()

    # --- sending ---------------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        require_library()
        if request.kind != Kind.NOTIFICATION and not self.config.answerers:
            raise DeliveryError("not sent: nobody may answer: allowed_users is empty", permanent=True)
        body: dict[str, Any] = {
            "content": compose(request, self.public_url, preview=shown(self, request)),
            "components": self._components(request),
            "allowed_mentions": NO_MENTIONS,
        }
        return await self._post(body)

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A reply to the request's own message (its buttons stay there), not a second copy."""
        message_id = (delivery.detail or {}).get("message_id")
        if message_id is None:
            return await super().remind(request, delivery, key)
        reference = {"message_id": str(message_id), "fail_if_not_exists": False}
        return await self._post(
            {"content": reminder(request), "message_reference": reference, "allowed_mentions": NO_MENTIONS}
        )

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Edit the message to the request and its outcome, without its buttons."""
        if request.kind == Kind.NOTIFICATION:
            return
        detail = delivery.detail or {}
        if "message_id" not in detail:
            return
        line = outcome_line(request, self.name)
        body = {
            "content": compose(request, self.public_url, outcome=line, preview=shown(self, request)),
            "components": [],
            "allowed_mentions": NO_MENTIONS,
        }
        where = str(detail["channel_id"])
        path = route("PATCH", _MESSAGE, channel_id=where, message_id=detail["message_id"])
        async with self._rest() as http:
            try:
                await call(http.request(path, json=body), "edit message", self.config, where)
            except DeliveryError as exc:
                if "not found" in str(exc):  # deleted by someone: nothing left to edit
                    return
                raise

    async def _post(self, body: dict[str, Any]) -> Delivery:
        where = str(self.config.channel_id)
        async with self._rest() as http:
            sent = await call(
                http.request(route("POST", _MESSAGES, channel_id=where), json=body),
                "send message",
                self.config,
                where,
            )
        return Delivery(
            ref=f"{where}:{sent['id']}", detail={"channel_id": where, "message_id": str(sent["id"])}
        )
