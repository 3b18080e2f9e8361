"""Telegram: the channel (its lifecycle, sending and retracting); answers are read in ``inbound.py``."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from hitl_mcp.channels.base import Delivery, DeliveryError
from hitl_mcp.channels.fitting import Room, shown
from hitl_mcp.channels.telegram.api import call, failure, new_api, not_modified, require_library
from hitl_mcp.channels.telegram.config import Config, log
from hitl_mcp.channels.telegram.inbound import WEBHOOK_PATH, TelegramInbound, _inline
from hitl_mcp.channels.telegram.render import ROOM, compose, outcome_line, reminder, wants_typed_reply
from hitl_mcp.core.models import Kind, Request


class TelegramChannel(TelegramInbound):
    type = "telegram"
    webhook_alias: ClassVar[str | None] = "telegram"
    extra: ClassVar[str | None] = "telegram"
    config: Config

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("telegram",)  # python-telegram-bot; httpx comes with it

    def preview_room(self) -> Room:
        return ROOM

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        require_library()
        self._api = new_api(self.config)
        if self.config.mode == "webhook" and not self.public_url:
            log.warning(
                "telegram %s: mode webhook needs server.public_url (an address Telegram can reach); "
                "polling instead",
                self.name,
            )
        if self.webhook:
            self.in_background(self._set_webhook())
        else:  # getUpdates has one caller at a time (a second gets 409 Conflict): one among replicas
            self.in_background(self._poll_forever, exclusive=True)

    async def close(self) -> None:
        await self.stop_background()
        api, self._api = self._api, None
        if api is not None:
            with anyio.CancelScope(shield=True):
                await api.close()

    async def check(self) -> str:
        require_library()
        async with self._bot() as bot:
            me = await call(bot.get_me(), "getMe", self.config)
        how = (
            f"answers by webhook at <public_url>/webhooks/{self.name}{WEBHOOK_PATH} (when server.public_url "
            "is set)"
            if self.config.mode == "webhook"
            else "answers by long polling"
        )
        parts = [f"ok: bot @{me.username} ({me.id}) posts to chat {self.config.chat_id}; {how}"]
        problem = self._why_unanswerable()
        if problem:
            parts.append(f"warning: {problem}")
        return "; ".join(parts)

    # --- sending ---------------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        require_library()
        if request.kind != Kind.NOTIFICATION:
            problem = self._why_unanswerable()
            if problem:
                raise DeliveryError(f"not sent: {problem}", permanent=True)
        from telegram import ForceReply, LinkPreviewOptions

        markup: Any = None
        rows = self._keyboard(request) if request.kind != Kind.NOTIFICATION else None
        if rows is not None:
            markup = _inline(rows)
        elif wants_typed_reply(request):
            markup = ForceReply(input_field_placeholder="Your answer")
        chat = self.config.chat_id
        async with self._bot() as bot:
            sent = await call(
                bot.send_message(
                    chat,
                    compose(request, self.public_url, preview=shown(self, request)),
                    parse_mode="HTML",
                    reply_markup=markup,
                    link_preview_options=LinkPreviewOptions(is_disabled=True),
                ),
                "sendMessage",
                self.config,
                str(chat),
            )
        return Delivery(
            ref=f"{chat}:{sent.message_id}", detail={"chat_id": chat, "message_id": sent.message_id}
        )

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A reply to the request's own message (its buttons stay there), not a second copy."""
        chat, message_id = _where(delivery)
        if message_id is None:
            return await super().remind(request, delivery, key)
        require_library()
        from telegram import ReplyParameters

        answered = ReplyParameters(message_id=message_id, allow_sending_without_reply=True)
        async with self._bot() as bot:
            sent = await call(
                bot.send_message(chat, reminder(request), parse_mode="HTML", reply_parameters=answered),
                "sendMessage",
                self.config,
                str(chat),
            )
        # a typed reply to the reminder finds the request by this ref
        return Delivery(
            ref=f"{chat}:{sent.message_id}", detail={"chat_id": chat, "message_id": sent.message_id}
        )

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Replace the message (and its buttons) with the request and its outcome."""
        if request.kind == Kind.NOTIFICATION:
            return
        chat, message_id = _where(delivery)
        if message_id is None:
            return
        line = outcome_line(request, self.name)
        text = compose(request, self.public_url, outcome=line, preview=shown(self, request))
        async with self._bot() as bot:
            try:
                await bot.edit_message_text(
                    text, chat_id=chat, message_id=message_id, parse_mode="HTML", reply_markup=None
                )
            except Exception as exc:
                if not_modified(exc):
                    return
                from telegram.error import TelegramError

                if isinstance(exc, TelegramError):
                    raise failure(exc, "editMessageText", self.config, str(chat)) from None
                raise


def _where(delivery: Delivery) -> tuple[int, int | None]:
    detail = delivery.detail or {}
    if "message_id" in detail:
        return int(detail["chat_id"]), int(detail["message_id"])
    if delivery.ref and ":" in delivery.ref:
        chat, _, mid = delivery.ref.rpartition(":")
        return int(chat), int(mid)
    return 0, None
