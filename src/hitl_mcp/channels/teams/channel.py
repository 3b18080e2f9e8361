"""Microsoft Teams: the channel (its lifecycle, sending, reminding, and replacing the card by the
outcome on settle); presses are read in ``inbound.py``. With ``workflow_url`` instead of a bot,
cards go to a Workflows webhook, notify-only: they link to the inbox, and nobody answers in Teams."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import httpx2

from hitl_mcp.channels.base import ChannelConfig, Delivery, DeliveryError, Hub
from hitl_mcp.channels.fitting import Room
from hitl_mcp.channels.teams.api import calling, load_sdk, refused
from hitl_mcp.channels.teams.config import HTTP_TIMEOUT, Config, log
from hitl_mcp.channels.teams.inbound import TeamsInbound
from hitl_mcp.channels.teams.render import ROOM, attachment, outcome_line, reminder
from hitl_mcp.core.models import Kind, Request


class TeamsChannel(TeamsInbound):
    type = "teams"
    extra: ClassVar[str | None] = "teams"
    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        self.answerable = self.config.bot

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("microsoft_teams", "msal") if getattr(config, "workflow_url", None) is None else ()

    def preview_room(self) -> Room:
        return ROOM

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if not self.config.bot:
            return
        await anyio.to_thread.run_sync(load_sdk)  # seconds of imports, off the event loop
        if not self.config.answerers:
            log.warning("teams %s: allowed_users is empty: nobody may answer", self.name)

    async def close(self) -> None:
        await self.connector.aclose()

    async def check(self) -> str:
        if not self.config.bot:
            return "ok: notify-only through a Workflows webhook (not called by check: it would post a card)"
        await anyio.to_thread.run_sync(load_sdk)  # seconds of imports, off the event loop
        await self.connector.token()
        conversation = self.config.conversation_id
        members = await calling(
            "read the conversation",
            lambda: self.connector.client().conversations.get_members(conversation or ""),
        )
        parts = [f"ok: the bot got its token and sees conversation {conversation} ({len(members)} members)"]
        if not self.config.answerers:
            parts.append("warning: allowed_users is empty: nobody may answer")
        return "; ".join(parts)

    # --- sending ---------------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        if not self.config.bot:
            return await self._to_workflow(request)
        if request.kind != Kind.NOTIFICATION and not self.config.answerers:
            raise DeliveryError("not sent: nobody may answer: allowed_users is empty", permanent=True)
        activity_id = await self.connector.send(attachment(self.card_of(request)))
        return Delivery(ref=activity_id, detail={"activity_id": activity_id})

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A reply to the request's message (in its thread, in a channel), not a second card."""
        if not self.config.bot or not delivery.ref:
            return await super().remind(request, delivery, key)
        sent = await self.connector.reply(delivery.ref, reminder(request))
        return Delivery(detail={"activity_id": sent})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Replace the card by the request and its outcome, without buttons."""
        if not self.config.bot or request.kind == Kind.NOTIFICATION or not delivery.ref:
            return
        settled = self.card_of(request, outcome=outcome_line(request, self.name))
        try:
            await self.connector.update(delivery.ref, attachment(settled))
        except DeliveryError as exc:
            if "no such" not in str(exc):  # a deleted message: nothing left to update
                raise

    async def _to_workflow(self, request: Request) -> Delivery:
        if request.kind != Kind.NOTIFICATION:  # the broker asks only channels that take answers
            raise DeliveryError("not sent: a Workflows webhook only notifies", permanent=True)
        assert self.config.workflow_url is not None
        message = {"type": "message", "attachments": [attachment(self.card_of(request))]}
        try:
            async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT) as client:
                response = await client.post(self.config.workflow_url.get_secret_value(), json=message)
        except httpx2.HTTPError as exc:
            raise DeliveryError(f"could not reach the Workflows webhook ({type(exc).__name__})") from None
        if response.status_code >= 300:
            raise refused("post to the Workflows webhook", response)
        return Delivery()
