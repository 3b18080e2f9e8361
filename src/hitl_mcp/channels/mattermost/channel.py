"""Mattermost: the channel (its lifecycle, sending, reminding and updating the post on settle);
answers are read in ``inbound.py``."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from hitl_mcp.channels.base import Delivery, DeliveryError
from hitl_mcp.channels.fitting import Room, shown
from hitl_mcp.channels.mattermost.api import call, new_client
from hitl_mcp.channels.mattermost.config import INSTALL_HINT, Config, log
from hitl_mcp.channels.mattermost.inbound import MattermostInbound
from hitl_mcp.channels.mattermost.render import ROOM, compose, outcome_line, reminder
from hitl_mcp.core.models import Kind, Request


def _require_library() -> None:
    try:
        import websockets  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


class MattermostChannel(MattermostInbound):
    type = "mattermost"
    extra: ClassVar[str | None] = "mattermost"
    config: Config

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("websockets",)

    def preview_room(self) -> Room:
        return ROOM

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        _require_library()
        try:
            me = await call(self._http(), "GET", "/users/me", self.config)
            self._bot_id = str(me["id"])
        except DeliveryError as exc:
            log.error("mattermost %s: %s", self.name, exc)
        if not self.config.answerers:
            log.warning("mattermost %s: allowed_users is empty: nobody may answer", self.name)
        # one WebSocket among the processes sharing the store (replicas)
        self.in_background(self._socket_forever, exclusive=True)

    async def close(self) -> None:
        await self.stop_background()
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def check(self) -> str:
        async with new_client(self.config) as client:
            me = await call(client, "GET", "/users/me", self.config)
            where = self.config.channel_id
            channel = await call(client, "GET", f"/channels/{where}", self.config, where=where)
        url = self.actions_url
        how = f"buttons post to {url}" if url else "answers by reaction or thread reply"
        parts = [
            f"ok: bot @{me.get('username')} posts to ~{channel.get('name', where)}; {how}, over the WebSocket"
        ]
        if not self.config.answerers:
            parts.append("warning: allowed_users is empty: nobody may answer")
        return "; ".join(parts)

    # --- sending ---------------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        if request.kind != Kind.NOTIFICATION and not self.config.answerers:
            raise DeliveryError("not sent: nobody may answer: allowed_users is empty", permanent=True)
        post = {
            "channel_id": self.config.channel_id,
            "message": compose(request, self.public_url, preview=shown(self, request)),
            "props": {"attachments": self._attachments(request)},
        }
        sent = await call(self._http(), "POST", "/posts", self.config, post, self.config.channel_id)
        return Delivery(ref=str(sent["id"]), detail={"post_id": str(sent["id"])})

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A reply in the request's thread, not a second copy."""
        if not delivery.ref:
            return await super().remind(request, delivery, key)
        post = {"channel_id": self.config.channel_id, "root_id": delivery.ref, "message": reminder(request)}
        sent = await call(self._http(), "POST", "/posts", self.config, post, self.config.channel_id)
        return Delivery(detail={"post_id": str(sent["id"])})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Update the post to the request and its outcome, without its buttons."""
        if request.kind == Kind.NOTIFICATION or not delivery.ref:
            return
        line = outcome_line(request, self.name)
        patch = {
            "message": compose(request, self.public_url, outcome=line, preview=shown(self, request)),
            "props": {"attachments": []},
        }
        try:
            await call(self._http(), "PUT", f"/posts/{delivery.ref}/patch", self.config, patch)
        except DeliveryError as exc:
            if "not found" not in str(exc):  # a deleted post: nothing left to update
                raise
