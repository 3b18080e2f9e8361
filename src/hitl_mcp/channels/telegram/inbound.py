"""Telegram: what the channel shares (its keys, its bot) and its inbound side: taps and replies, by long
polling or by webhook, checked and handed to the kit."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels._replies import choice_by_number
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import ChannelConfig, DeliveryError, Hub, Unknown, allowed
from hitl_mcp.channels.fitting import approve_here
from hitl_mcp.channels.telegram.api import Api, call, failure, new_api, not_modified, require_library
from hitl_mcp.channels.telegram.config import (
    ALLOWED_UPDATES,
    MAX_BODY,
    POLL_RETRY,
    TOAST_LIMIT,
    Config,
    log,
)
from hitl_mcp.channels.telegram.render import (
    APPROVE,
    BACK,
    CONFIRM,
    DENY,
    REMEMBER,
    ButtonTokens,
    Row,
    clip,
    keyboard,
)
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.core.wording import already
from hitl_mcp.kit.net import read_within
from hitl_mcp.kit.signing import b64url, derive_key

#: the path Telegram POSTs updates to in webhook mode, under /webhooks/<channel name>
WEBHOOK_PATH = "/update"


class TelegramInbound(BaseChannel):
    """The part of the channel that reads answers; ``TelegramChannel`` adds sending and the lifecycle."""

    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        self._api: Api | None = None

    def _keyboard(self, request: Request, confirming: bool = False) -> list[Row] | None:
        """The buttons, with Approve only when the preview is shown whole (``fitting``)."""
        inbox = f"{self.public_url.rstrip('/')}/requests/{request.id}" if self.public_url else None
        approve = approve_here(self, request) is None
        return keyboard(request, self.tokens, confirming=confirming, approve=approve, inbox=inbox)

    # --- what this channel is --------------------------------------------------------------------

    @property
    def webhook(self) -> bool:
        """Answers come to our webhook: mode webhook, and a public URL for Telegram to reach."""
        return self.config.mode == "webhook" and bool(self.public_url)

    @property
    def webhook_url(self) -> str:
        return f"{(self.public_url or '').rstrip('/')}/webhooks/{self.name}{WEBHOOK_PATH}"

    def _why_unanswerable(self) -> str | None:
        if not self.config.answerers:
            return f"nobody may answer in group {self.config.chat_id}: allowed_users is not set"
        return None

    def _secret(self, label: str) -> bytes:
        """A key for one use, derived from the bot token: every server of this bot derives the same one
        (a button sent by one verifies on another, and all give setWebhook the same secret), and it
        protects nothing from whoever holds the token, who could speak as the bot anyway."""
        return derive_key(self.config.bot_token.get_secret_value(), f"hitl-mcp {label}")

    @property
    def tokens(self) -> ButtonTokens:
        return ButtonTokens(self._secret("telegram buttons"))

    @property
    def webhook_secret(self) -> str:
        """The ``secret_token`` given to setWebhook: Telegram echoes it in every update's header."""
        return b64url(self._secret("telegram webhook secret"))

    @contextlib.asynccontextmanager
    async def _bot(self) -> AsyncIterator[Any]:
        """The started channel's bot, or one for this call only (``check``, ``test-channel``)."""
        if self._api is not None:
            yield self._api.bot
            return
        require_library()
        api = new_api(self.config)
        try:
            yield api.bot
        finally:
            with anyio.CancelScope(shield=True):
                await api.close()

    # --- inbound: long polling -------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        """getUpdates in a loop; the offset is kept in ``self.state``, so a restart neither loses an
        update nor handles one twice."""
        from telegram.error import Conflict, InvalidToken, RetryAfter

        from hitl_mcp.channels.telegram.api import retry_after_seconds

        assert self._api is not None
        bot = self._api.bot
        offset = int(await self.state.get("offset") or 0)
        attempt = 0
        while True:
            try:
                updates = await bot.get_updates(
                    offset=offset or None,
                    timeout=dtm.timedelta(seconds=self.config.poll_timeout),
                    allowed_updates=list(ALLOWED_UPDATES),
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                attempt += 1
                delay = POLL_RETRY.delay(attempt)
                if isinstance(exc, RetryAfter):
                    delay = retry_after_seconds(exc)
                    log.warning("telegram %s: getUpdates rate limited; again in %.0fs", self.name, delay)
                elif isinstance(exc, Conflict) and "webhook" in str(exc).lower():
                    log.warning("telegram %s: a webhook is set; deleting it to poll instead", self.name)
                    with contextlib.suppress(Exception):
                        await bot.delete_webhook(drop_pending_updates=False)
                        delay = 0
                elif isinstance(exc, InvalidToken):
                    log.error(
                        "telegram %s: Telegram rejected the bot_token; answers will not arrive until it is "
                        "fixed (trying again in %.0fs)",
                        self.name,
                        delay,
                    )
                else:
                    why = failure(exc, "getUpdates", self.config)
                    log.warning("telegram %s: %s; polling again in %.0fs", self.name, why, delay)
                await asyncio.sleep(delay)
                continue
            attempt = 0
            for update in updates:
                try:
                    await self._process(update)
                    offset = update.update_id + 1
                    await self.state.set("offset", str(offset))
                except Exception:  # the store, most likely: keep polling, and take this update again
                    attempt += 1
                    delay = POLL_RETRY.delay(attempt)
                    log.exception(
                        "telegram %s: update %s not handled; again in %.0fs",
                        self.name,
                        update.update_id,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    break

    # --- inbound: webhook ------------------------------------------------------------------------

    async def _set_webhook(self) -> None:
        assert self._api is not None
        attempt = 0
        while True:
            attempt += 1
            try:
                await call(
                    self._api.bot.set_webhook(
                        self.webhook_url,
                        secret_token=self.webhook_secret,
                        allowed_updates=list(ALLOWED_UPDATES),
                    ),
                    "setWebhook",
                    self.config,
                )
            except DeliveryError as exc:
                if exc.permanent:
                    log.error("telegram %s: answers will not arrive: %s", self.name, exc)
                    return
                delay = exc.retry_after if exc.retry_after is not None else POLL_RETRY.delay(attempt)
                log.warning("telegram %s: %s; trying again in %.0fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                continue
            log.info("telegram %s: answers come to %s", self.name, self.webhook_url)
            return

    def routes(self) -> list[BaseRoute]:
        if not self.webhook:
            return []
        return [Route(WEBHOOK_PATH, self._inbound, methods=["POST"])]

    async def _inbound(self, http: HttpRequest) -> Response:
        sent = http.headers.get("x-telegram-bot-api-secret-token", "")
        if not hmac.compare_digest(sent.encode(), self.webhook_secret.encode()):
            return JSONResponse({"error": "wrong or missing secret token"}, status_code=403)
        body = await read_within(http.stream(), MAX_BODY)
        if body is None:
            return JSONResponse({"error": "body too large"}, status_code=413)
        from telegram import Update

        try:
            update = Update.de_json(json.loads(body), self._api.bot if self._api else None)
        except Exception:  # not JSON, or JSON that is no Update
            return JSONResponse({"error": "expected a Telegram Update"}, status_code=400)
        # Telegram waits for our answer before it sends the next update: answer first, work after
        return Response(status_code=200, background=BackgroundTask(self._process_logged, update))

    # --- inbound: both ---------------------------------------------------------------------------

    async def _process_logged(self, update: Any) -> None:
        try:
            await self._process(update)
        except Exception:  # after the response: Telegram has been told 200, so it will not resend
            log.exception("telegram %s: could not handle update %s", self.name, update.update_id)

    async def _process(self, update: Any) -> None:
        if await self.state.seen(f"update:{update.update_id}"):
            return  # a webhook retry, or an update polled again
        try:
            if update.callback_query is not None:
                try:
                    await self._on_press(update.callback_query)
                except Exception:  # the press still gets its answer: no spinner left on the button
                    await self._toast(update.callback_query, "Not recorded: hitl-mcp failed; try again.")
                    raise
            elif update.message is not None:
                await self._on_message(update.message)
        except Exception:
            log.exception("telegram %s: could not handle update %s", self.name, update.update_id)

    async def _on_press(self, query: Any) -> None:
        user = query.from_user
        who = _who(user)
        parsed = self.tokens.read(query.data)
        if parsed is None:
            await self.ignore(None, who, "a button hitl-mcp did not sign", user_id=user.id)
            await self._toast(query, "This button is not valid.")
            return
        request_id, action = parsed
        if not allowed(str(user.id), self.config.answerers):
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request_id, who, reason, user_id=user.id)
            await self._toast(query, "You are not allowed to answer this request.", alert=True)
            return
        request = await self.hub.get(request_id)
        if request is None:
            await self._toast(query, Unknown(request_id).words)
            return
        if action == BACK and not request.is_open:
            await self._toast(query, f"Not recorded: {already(request)}.")
            return
        if request.is_open and request.kind == Kind.APPROVAL and action in (APPROVE, BACK):
            if action == BACK or request.risk == "high":
                confirming = action == APPROVE
                await self._set_buttons(query, self._keyboard(request, confirming=confirming))
                await self._toast(
                    query,
                    "High-risk action: press “Yes, approve” to confirm." if confirming else "Not approved.",
                )
                return
        fields: dict[str, Any]
        if action in (APPROVE, CONFIRM):
            fields = {"decision": "approve"}
        elif action == REMEMBER and request.risk != "high":
            fields = {"decision": "approve", "remember": True}
        elif action == DENY:
            fields = {"decision": "deny"}
        elif action.isdigit() and int(action) < len(request.choices or []):
            fields = {"choice": (request.choices or [])[int(action)]}
        else:
            await self.ignore(request_id, who, f"a button that does not fit the request ({action})")
            await self._toast(query, "This button does not fit the request.")
            return
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=who, identity=str(user.id), **fields)
        )
        await self._toast(query, outcome.words)

    async def _on_message(self, message: Any) -> None:
        user = message.from_user
        text = message.text
        if user is None or user.is_bot or text is None:
            return  # service messages (joins, pins), stickers and photos: nothing to read
        who = _who(user)
        chat = message.chat.id
        replied = message.reply_to_message
        request = await self.find_by_ref(f"{chat}:{replied.message_id}") if replied is not None else None
        is_allowed = allowed(str(user.id), self.config.answerers)
        if request is None:
            await self.ignore(None, who, "a message that is not a reply to a hitl-mcp request", chat_id=chat)
            private = chat == self.config.chat_id and not self.config.is_group
            if is_allowed and private and not text.startswith("/"):  # not /start, or another command
                await self._say(
                    chat, "To answer, reply to the request's message (swipe left on it).", message
                )
            return
        if not is_allowed:
            reason = "not in allowed_users" if self.config.answerers else "allowed_users is not set"
            await self.ignore(request.id, who, reason, user_id=user.id)
            return
        if request.kind != Kind.QUESTION:
            what = "an approval" if request.kind == Kind.APPROVAL else "a notification"
            await self.ignore(request.id, who, f"a typed reply to {what}")
            if request.kind == Kind.APPROVAL:
                await self._say(
                    chat, "An approval needs a button: press Approve or Deny on the message.", message
                )
            return
        choice = choice_by_number(text, request.choices)
        fields = {"choice": choice} if choice is not None else {"text": text}
        outcome = await self.answer(
            request.id, Reply(channel=self.name, responder=who, identity=str(user.id), **fields)
        )
        await self._say(chat, outcome.words, message)

    # --- small calls, best effort ------------------------------------------------------------------

    async def _toast(self, query: Any, text: str, alert: bool = False) -> None:
        """answerCallbackQuery: always, or the person's app shows a spinner on the button."""
        async with self._bot() as bot:
            try:
                await call(
                    bot.answer_callback_query(query.id, text=clip(text, TOAST_LIMIT), show_alert=alert),
                    "answerCallbackQuery",
                    self.config,
                )
            except DeliveryError as exc:
                log.warning("telegram %s: %s", self.name, exc)

    async def _say(self, chat: int, text: str, to: Any) -> None:
        async with self._bot() as bot:
            try:
                await call(
                    bot.send_message(chat, text, reply_to_message_id=to.message_id),
                    "sendMessage",
                    self.config,
                    str(chat),
                )
            except DeliveryError as exc:
                log.warning("telegram %s: %s", self.name, exc)

    async def _set_buttons(self, query: Any, rows: list[Row] | None) -> None:
        message = query.message
        if message is None:
            return
        async with self._bot() as bot:
            try:
                await bot.edit_message_reply_markup(
                    chat_id=message.chat.id,
                    message_id=message.message_id,
                    reply_markup=_inline(rows) if rows else None,
                )
            except Exception as exc:
                if not not_modified(exc):
                    log.warning(
                        "telegram %s: %s", self.name, failure(exc, "editMessageReplyMarkup", self.config)
                    )


def _inline(rows: list[Row]) -> Any:
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    def button(label: str, data: str) -> Any:  # a link to the inbox, or a signed answer
        is_url = data.startswith(("https://", "http://"))
        return (
            InlineKeyboardButton(label, url=data)
            if is_url
            else InlineKeyboardButton(label, callback_data=data)
        )

    return InlineKeyboardMarkup([[button(label, data) for label, data in row] for row in rows])


def _who(user: Any) -> str:
    """How a person is recorded: ``@username (id)``, else their name and id; ids are what is checked."""
    if user.username:
        return f"@{user.username} ({user.id})"
    name = " ".join(p for p in (user.first_name, user.last_name) if p)
    return f"{name} ({user.id})" if name else str(user.id)
