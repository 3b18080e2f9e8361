"""A local Telegram Bot API: the methods hitl-mcp calls, in Telegram's wire format.

The real python-telegram-bot talks to it through ``api_base``. It answers with schema-valid objects
(``is_bot``, dates in seconds...), so PTB's strict ``de_json`` checks it for free; it takes form-encoded
bodies (what PTB sends, with ``reply_markup`` as a JSON string) and JSON ones; and it refuses what
Telegram refuses: HTML it cannot parse, a text over 4,096 characters, ``callback_data`` over 64 bytes, an
edit that changes nothing. ``getUpdates`` is a real long poll: it holds the request until an update is
queued or its timeout passes.

It also plays the people: ``press`` and ``reply`` queue the updates Telegram would send for a tap on a
button that was really sent, or a reply to a message that exists. Every call fires ``changes``.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.events import Changes, until

BOT_TOKEN = "123456789:AAStandinBotTokenSecret_0123456789abc"
BOT = {"id": 123456789, "is_bot": True, "first_name": "hitl", "username": "hitl_standin_bot"}
SAM, ANA, EVE = 1001, 1002, 1003  # people; each has a private chat with the bot under their own id
PEOPLE = {SAM: ("Sam", "sam"), ANA: ("Ana", None), EVE: ("Eve", "eve")}
GROUP = -1001234567890
BLOCKED = 1004  # a person who never pressed Start: the bot may not write to them
#: a "<" that starts no tag, or a "&" that starts no entity: Telegram's HTML mode refuses both
_STRAY = re.compile(r"<(?!/?[a-z]+(?:\s[^<>]*)?>)|&(?!(?:lt|gt|amp|quot|#\d+|#x[0-9a-fA-F]+);)")
_BOOLS = {"true": True, "false": False}
_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre", "blockquote"}


@dataclass
class Sent:
    """A message the bot sent; ``versions`` holds earlier (html, reply_markup) pairs."""

    chat_id: int
    message_id: int
    html: str
    reply_markup: dict[str, Any] | None
    reply_to: int | None = None
    versions: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)

    @property
    def text(self) -> str:
        """What the person reads: the HTML parsed."""
        return _visible(self.html)

    def buttons(self) -> list[dict[str, Any]]:
        rows = (self.reply_markup or {}).get("inline_keyboard") or []
        return [button for row in rows for button in row]

    def button(self, label: str) -> dict[str, Any]:
        found = [b for b in self.buttons() if label in b["text"]]
        if len(found) > 1:  # "Approve" beside "Approve & remember": the label that is the whole word
            found = [b for b in found if b["text"].split(" ", 1)[-1] == label]
        assert len(found) == 1, f"no single button {label!r} in {[b['text'] for b in self.buttons()]}"
        return found[0]


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


class ApiError(Exception):
    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        self.code, self.description, self.parameters = code, description, parameters


class TelegramStandin:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.messages: list[Sent] = []
        self.updates: list[dict[str, Any]] = []  # queued and not yet confirmed by an offset
        self.toasts: list[dict[str, Any]] = []  # answerCallbackQuery calls
        self.webhook: dict[str, Any] | None = None
        #: per method, the retry_after of the 429s to answer with next
        self.rate_limits: dict[str, list[int]] = {}
        #: per method, the (status, description) of the failures to answer with next
        self.failures: dict[str, list[tuple[int, str]]] = {}
        self.changes = Changes()
        self.closed = False
        self._queued = Changes()
        self._message_ids = itertools.count(100)
        self._update_ids = itertools.count(5000)
        self._query_ids = itertools.count(1)
        self.app = Starlette(routes=[Route("/bot{token}/{method}", self._endpoint, methods=["GET", "POST"])])

    def close(self) -> None:
        """Let every held long poll go (before the server stops under it)."""
        self.closed = True
        self._queued.fire()

    # --- what the bot did ------------------------------------------------------------------------

    def called(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def until(self, check: Any, seconds: float = 10) -> Any:
        return await until(check, self.changes, seconds)

    async def sent(self, count: int = 1) -> Sent:
        """The ``count``-th message the bot sent, once it is."""
        await self.until(lambda: len(self.messages) >= count)
        return self.messages[count - 1]

    def message(self, chat_id: int, message_id: int) -> Sent:
        return next(m for m in self.messages if (m.chat_id, m.message_id) == (chat_id, message_id))

    # --- the people ------------------------------------------------------------------------------

    def press(self, message: Sent, label: str, user: int, data: str | None = None) -> dict[str, Any]:
        """A tap on one of the message's buttons (or, with ``data``, a forged one)."""
        button = message.button(label) if data is None else {"callback_data": data}
        query = {
            "id": str(next(self._query_ids)),
            "from": _user(user),
            "message": self._message_doc(message),
            "chat_instance": "-4242",
            "data": button["callback_data"],
        }
        return self.queue({"callback_query": query})

    def reply(self, message: Sent | None, user: int, text: str, chat: int | None = None) -> dict[str, Any]:
        """A message from ``user``: a reply to ``message``, or (None) a plain one in ``chat``."""
        where = message.chat_id if message is not None else (chat or user)
        doc: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "from": _user(user),
            "chat": _chat(where),
            "date": int(time.time()),
            "text": text,
        }
        if message is not None:
            doc["reply_to_message"] = self._message_doc(message)
        return self.queue({"message": doc})

    def queue(self, update: dict[str, Any]) -> dict[str, Any]:
        """An update as Telegram holds it until the bot confirms it (getUpdates with a higher offset)."""
        update = {"update_id": next(self._update_ids), **update}
        self.updates.append(update)
        self._queued.fire()
        self.changes.fire()
        return update

    def _message_doc(self, message: Sent) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "message_id": message.message_id,
            "from": BOT,
            "chat": _chat(message.chat_id),
            "date": int(time.time()),
            "text": message.text,
        }
        if message.reply_markup and "inline_keyboard" in message.reply_markup:
            doc["reply_markup"] = message.reply_markup
        return doc

    # --- the Bot API -----------------------------------------------------------------------------

    async def _endpoint(self, request: Request) -> JSONResponse:
        method = request.path_params["method"]
        if request.path_params["token"] != BOT_TOKEN:
            return JSONResponse({"ok": False, "error_code": 401, "description": "Unauthorized"}, 401)
        args = await _arguments(request)
        self.calls.append(Call(method, args))
        self.changes.fire()
        try:
            limits = self.rate_limits.get(method)
            if limits:
                wait = limits.pop(0)
                raise ApiError(429, f"Too Many Requests: retry after {wait}", {"retry_after": wait})
            failing = self.failures.get(method)
            if failing:
                raise ApiError(*failing.pop(0))
            handler = getattr(self, f"_m_{method}", None)
            if handler is None:
                raise ApiError(404, "Not Found")
            result = await handler(args)
        except ApiError as exc:
            body: dict[str, Any] = {"ok": False, "error_code": exc.code, "description": exc.description}
            if exc.parameters:
                body["parameters"] = exc.parameters
            return JSONResponse(body, exc.code)
        finally:
            self.changes.fire()
        return JSONResponse({"ok": True, "result": result})

    async def _m_getMe(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            **BOT,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _m_sendMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        chat = int(args["chat_id"])
        if chat == BLOCKED:
            raise ApiError(403, "Forbidden: bot can't initiate conversation with a user")
        if chat not in PEOPLE and chat != GROUP:
            raise ApiError(400, "Bad Request: chat not found")
        text = str(args.get("text") or "")
        markup = _markup(args.get("reply_markup"))
        _check_text(text, args.get("parse_mode"))
        message = Sent(chat, next(self._message_ids), _as_html(text, args.get("parse_mode")), markup)
        reply_to = args.get("reply_to_message_id") or (args.get("reply_parameters") or {}).get("message_id")
        message.reply_to = int(reply_to) if reply_to else None
        self.messages.append(message)
        return self._message_doc(message)

    async def _m_editMessageText(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._editing(args)
        text = str(args.get("text") or "")
        _check_text(text, args.get("parse_mode"))
        new = (_as_html(text, args.get("parse_mode")), _markup(args.get("reply_markup")))
        if new == (message.html, message.reply_markup):
            raise ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup of the message",
            )
        message.versions.append((message.html, message.reply_markup))
        message.html, message.reply_markup = new
        return self._message_doc(message)

    async def _m_editMessageReplyMarkup(self, args: dict[str, Any]) -> dict[str, Any]:
        message = self._editing(args)
        markup = _markup(args.get("reply_markup"))
        if markup == message.reply_markup:
            raise ApiError(400, "Bad Request: message is not modified")
        message.versions.append((message.html, message.reply_markup))
        message.reply_markup = markup
        return self._message_doc(message)

    def _editing(self, args: dict[str, Any]) -> Sent:
        try:
            return self.message(int(args["chat_id"]), int(args["message_id"]))
        except (KeyError, StopIteration, ValueError):
            raise ApiError(400, "Bad Request: message to edit not found") from None

    async def _m_answerCallbackQuery(self, args: dict[str, Any]) -> bool:
        if len(str(args.get("text") or "")) > 200:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self.toasts.append(args)
        return True

    async def _m_getUpdates(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook is not None:
            raise ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(args.get("offset") or 0)
        timeout = float(args.get("timeout") or 0)
        if offset:  # confirms every update below it: Telegram forgets them
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
        wanted = args.get("allowed_updates")
        with anyio.move_on_after(timeout):  # the long poll: held until an update is queued
            while not self.updates and not self.closed:
                await self._queued.armed().wait()
        found = [u for u in self.updates if wanted is None or any(k in u for k in wanted)]
        return found[: int(args.get("limit") or 100)]

    async def _m_setWebhook(self, args: dict[str, Any]) -> bool:
        secret = args.get("secret_token")
        if secret is not None and not (
            1 <= len(secret) <= 256 and all(c.isalnum() or c in "_-" for c in secret)
        ):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        self.webhook = args
        return True

    async def _m_deleteWebhook(self, args: dict[str, Any]) -> bool:
        self.webhook = None
        return True


# --- documents ---------------------------------------------------------------------------------------


def _user(user_id: int) -> dict[str, Any]:
    first, username = PEOPLE.get(user_id, ("Someone", None))
    doc: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first, "language_code": "en"}
    if username:
        doc["username"] = username
    return doc


def _chat(chat_id: int) -> dict[str, Any]:
    if chat_id < 0:
        return {"id": chat_id, "type": "supergroup", "title": "Ops"}
    return {"id": chat_id, "type": "private", "first_name": PEOPLE.get(chat_id, ("Someone", None))[0]}


async def _arguments(request: Request) -> dict[str, Any]:
    """A method's arguments from the query string, a JSON body or a form (PTB sends forms, with
    objects such as ``reply_markup`` as JSON strings)."""
    args: dict[str, Any] = dict(request.query_params)
    body = await request.body()
    if request.headers.get("content-type", "").startswith("application/json") and body:
        args.update(json.loads(body))
    elif body:
        form = {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
        args.update({k: _BOOLS.get(v.lower(), v) for k, v in form.items()})
    for key in ("reply_markup", "allowed_updates", "reply_parameters", "link_preview_options"):
        if isinstance(args.get(key), str):
            args[key] = json.loads(args[key])
    return args


def _markup(value: Any) -> dict[str, Any] | None:
    if not value:
        return None
    for row in value.get("inline_keyboard") or []:
        for button in row:
            data = button.get("callback_data")
            if data is not None and not 1 <= len(data.encode()) <= 64:
                raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
    return dict(value)


class _Checker(HTMLParser):
    """Telegram's HTML mode: only its tags, properly nested; what is left is the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            self.error = self.error or f'unsupported start tag "{tag}"'
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.error = self.error or f'unexpected end tag "{tag}"'

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _visible(text: str) -> str:
    checker = _Checker()
    checker.feed(text)
    checker.close()
    return "".join(checker.text)


def _as_html(text: str, parse_mode: Any) -> str:
    return text if parse_mode == "HTML" else html.escape(text, quote=False)


def _check_text(text: str, parse_mode: Any) -> None:
    if not text.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    visible = text
    if parse_mode == "HTML":
        stray = _STRAY.search(text)
        if stray:
            raise ApiError(
                400, f"Bad Request: can't parse entities: unexpected {stray.group()!r} at {stray.start()}"
            )
        checker = _Checker()
        checker.feed(text)
        checker.close()
        if checker.error or checker.open:
            why = checker.error or f'can\'t find end tag corresponding to start tag "{checker.open[-1]}"'
            raise ApiError(400, f"Bad Request: can't parse entities: {why}")
        visible = "".join(checker.text)
    if len(visible.encode("utf-16-le")) // 2 > 4096:
        raise ApiError(400, "Bad Request: message is too long")
