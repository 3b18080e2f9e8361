"""Slack: a Block Kit message with buttons; answered by a button, a typed answer or a thread reply.

Answers come back over Socket Mode when ``app_token`` is set (no public URL needed), else as signed
HTTP requests to ``/webhooks/slack/interactivity`` and ``/webhooks/slack/events`` (``signing_secret``).
Every message carries the request id in its ``block_id``s, and the delivery ref is ``CHANNEL:TS``, so a
click or a thread reply finds its request. Only ``allowed_users`` may answer: by default the ``users``
a direct message went to, and for a channel nobody until it is set.

``slack_sdk`` (the ``[slack]`` extra) is imported only when the channel is used, never by ``Config``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import SecretStr, field_validator, model_validator
from starlette.background import BackgroundTask
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Answered, ChannelConfig, Delivery, DeliveryError, allowed
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.models import Kind, Reply, Request, Status
from hitl_mcp.retry import RetryPolicy, retry_after
from hitl_mcp.wording import expired, verdict

log = logging.getLogger("hitl_mcp.channels.slack")

DEFAULT_API = "https://slack.com/api/"
#: a 429 asking to wait longer than this is not slept out inside the call: the outbox retries later
MAX_RATE_LIMIT_WAIT = 5.0
RATE_LIMIT_RETRIES = 2
MAX_BODY = 1024 * 1024
SECTION_LIMIT = 3000  # Slack: a section's text
HEADER_LIMIT = 150
BUTTON_LIMIT = 75
#: reconnecting Socket Mode after a transient failure
SOCKET_RETRY = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=60.0)
INSTALL_HINT = "the slack channel needs slack_sdk and aiohttp: pip install 'mcp-hitl[slack]'"

_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_MENTION = re.compile(r"[UWS][A-Z0-9]{2,}|here|channel|everyone")
_RESPONDER = re.compile(r"@.+ \(([UW][A-Z0-9]+)\)")


class Config(ChannelConfig):
    type: Literal["slack"] = "slack"
    bot_token: SecretStr
    """The Bot User OAuth Token, xoxb-…"""
    app_token: SecretStr | None = None
    """An app-level token (xapp-…, scope connections:write): Socket Mode, no public URL needed."""
    signing_secret: SecretStr | None = None
    """HTTP mode (when there is no app_token): verifies Slack's requests to /webhooks/slack/..."""
    channel: str | None = None
    """A channel id (C0123ABCD) to post in; or use ``users``."""
    users: list[str] | None = None
    """User ids (U0123ABCD) to send direct messages to."""
    allowed_users: list[str] | None = None
    """Who may answer. Default for direct messages: ``users``. For a channel it must be set."""
    mention: str | None = None
    """A user id, a user group id (S…), or here / channel, to @-mention in each message."""
    api_base_url: str = DEFAULT_API

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value().startswith("xapp-"):
            raise ValueError("this is an app-level token (xapp-…); bot_token takes the Bot User OAuth Token")
        if not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("app_token")
    @classmethod
    def _app_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xapp-"):
            raise ValueError(
                "expected an app-level token (xapp-…, from Basic Information > App-Level Tokens)"
            )
        return value

    @field_validator("signing_secret")
    @classmethod
    def _signing_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str | None) -> str | None:
        if value is not None and not _CHANNEL_ID.fullmatch(value):
            raise ValueError(
                f"expected a channel id such as C0123ABCD, got {value[:40]!r} (in Slack, open the "
                "channel's details: the id is at the bottom)"
            )
        return value

    @field_validator("users", "allowed_users")
    @classmethod
    def _user_ids(cls, value: list[str] | None) -> list[str] | None:
        for user in value or []:
            if not _USER_ID.fullmatch(user):
                raise ValueError(
                    f"expected user ids such as U0123ABCD, got {user[:40]!r} (in Slack: a person's "
                    "profile > ⋮ > Copy member ID)"
                )
        return value

    @field_validator("mention")
    @classmethod
    def _mention(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.removeprefix("@")
        if not _MENTION.fullmatch(value):
            raise ValueError("expected a user id (U…), a user group id (S…), here or channel")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _api_base_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://slack.com/api/")
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _destination(self) -> Config:
        if (self.channel is None) == (self.users is None):
            raise ValueError(
                "set exactly one of channel (a channel id) or users (user ids, for direct messages)"
            )
        if self.users is not None and not self.users:
            raise ValueError("users must name at least one user id")
        return self


# --------------------------------------------------------------------------------------- the channel


class Channel(BaseChannel):
    type = "slack"
    webhook_alias = "slack"
    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Any) -> None:
        super().__init__(name, config, hub)
        self._client: Any = None
        self._socket: Any = None
        self._socket_task: asyncio.Task[None] | None = None
        self._dm: dict[str, str] = {}

    @property
    def allowed(self) -> frozenset[str]:
        """Who may answer: ``allowed_users``, else the ``users`` of direct messages, else nobody."""
        if self.config.allowed_users is not None:
            return frozenset(self.config.allowed_users)
        return frozenset(self.config.users or ())

    def _why_unanswerable(self) -> str | None:
        c = self.config
        if c.app_token is None and c.signing_secret is None:
            return "answers cannot come back: set app_token (Socket Mode) or signing_secret (HTTP mode)"
        if not self.allowed:
            return f"nobody may answer in {c.channel}: allowed_users is not set"
        return None

    def _web(self) -> Any:
        if self._client is None:
            self._client = _web_client(self.config.bot_token.get_secret_value(), self.config.api_base_url)
        return self._client

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.app_token is None:
            if self.config.signing_secret is None:
                log.warning("slack %s: %s", self.name, self._why_unanswerable())
            return
        _require_sdk()
        self._socket_task = asyncio.get_running_loop().create_task(self._run_socket())

    async def close(self) -> None:
        if self._socket_task is not None:
            self._socket_task.cancel()
            await asyncio.wait([self._socket_task], timeout=2)
        if self._socket is not None:
            await self._socket.close()

    async def check(self) -> str:
        _require_sdk()
        client = _web_client(self.config.bot_token.get_secret_value(), self.config.api_base_url)
        auth = await _call(client.auth_test(), "auth.test", self.config)
        parts = [f"ok: bot @{auth.get('user')} in team {auth.get('team')} ({auth.get('team_id')})"]
        if self.config.app_token is not None:
            await _call(
                client.apps_connections_open(app_token=self.config.app_token.get_secret_value()),
                "apps.connections.open",
                self.config,
                token="app_token",
            )
            parts.append("answers over Socket Mode")
        elif self.config.signing_secret is not None:
            parts.append(
                f"answers over HTTP: request URLs <public_url>/webhooks/{self.name}/interactivity and "
                f"<public_url>/webhooks/{self.name}/events"
            )
        problem = self._why_unanswerable()
        if problem:
            parts.append(f"warning: {problem}")
        return "; ".join(parts)

    # --- sending -----------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        _require_sdk()
        if request.kind != Kind.NOTIFICATION:
            problem = self._why_unanswerable()
            if problem:
                raise DeliveryError(f"not sent: {problem}", permanent=True)
        mention = _mention(self.config.mention)
        blocks = render(request, self.public_url, mention)
        text = _fallback(request, mention)
        if self.config.channel is not None:
            ts = await self._post(self.config.channel, text, blocks)
            return Delivery(
                ref=f"{self.config.channel}:{ts}", detail={"messages": [[self.config.channel, ts]]}
            )
        messages: list[list[str]] = []
        failures: list[DeliveryError] = []
        for user in self.config.users or []:
            try:
                where = await self._dm_channel(user)
                messages.append([where, await self._post(where, text, blocks)])
            except DeliveryError as exc:
                failures.append(exc)
        if not messages:
            transient = [f for f in failures if not f.permanent]
            raise transient[0] if transient else failures[0]
        detail: dict[str, Any] = {"messages": messages}
        if failures:
            detail["failed"] = [str(f) for f in failures]
            log.warning("slack %s: some direct messages failed: %s", self.name, "; ".join(detail["failed"]))
        return Delivery(ref=":".join(messages[0]), detail=detail)

    async def retract(self, request: Request, delivery: Delivery) -> None:
        messages = delivery.detail.get("messages") or ([delivery.ref.split(":", 1)] if delivery.ref else [])
        line = outcome_line(request, self.name)
        blocks = render(request, self.public_url, None, outcome=line)
        first_error: DeliveryError | None = None
        for where, ts in messages:
            try:
                await _call(
                    self._web().chat_update(channel=where, ts=ts, text=_plain(line), blocks=blocks),
                    "chat.update",
                    self.config,
                    where,
                )
            except DeliveryError as exc:
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    async def _post(self, where: str, text: str, blocks: list[dict[str, Any]]) -> str:
        sent = await _call(
            self._web().chat_postMessage(channel=where, text=text, blocks=blocks, unfurl_links=False),
            "chat.postMessage",
            self.config,
            where,
        )
        return str(sent["ts"])

    async def _dm_channel(self, user: str) -> str:
        if user not in self._dm:
            opened = await _call(
                self._web().conversations_open(users=user), "conversations.open", self.config, user
            )
            self._dm[user] = opened["channel"]["id"]
        return self._dm[user]

    async def _tell(self, where: str | None, user: str, text: str, thread_ts: str | None = None) -> None:
        """An ephemeral note only ``user`` sees; best effort."""
        if not where:
            return
        try:
            await _call(
                self._web().chat_postEphemeral(channel=where, user=user, text=text, thread_ts=thread_ts),
                "chat.postEphemeral",
                self.config,
                where,
            )
        except DeliveryError as exc:
            log.warning("slack %s: could not tell %s: %s", self.name, user, exc)

    # --- inbound: Socket Mode ------------------------------------------------------------------

    async def _run_socket(self) -> None:
        """Open the Socket Mode connection; the SDK keeps it open (and reconnects on drops)."""
        from slack_sdk.socket_mode.aiohttp import SocketModeClient

        assert self.config.app_token is not None
        app_token = self.config.app_token.get_secret_value()
        client = SocketModeClient(app_token=app_token, web_client=self._web())
        client.socket_mode_request_listeners.append(self._on_envelope)
        self._socket = client
        attempt = 0
        while True:
            attempt += 1
            try:
                opened = await _call(
                    self._web().apps_connections_open(app_token=app_token),
                    "apps.connections.open",
                    self.config,
                    token="app_token",
                )
            except DeliveryError as exc:
                if exc.permanent:
                    log.error("slack %s: Socket Mode is off, answers will not arrive: %s", self.name, exc)
                    return
                delay = SOCKET_RETRY.delay(attempt)
                log.warning("slack %s: Socket Mode: %s; retrying in %.0fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                continue
            client.wss_uri = opened["url"]
            await client.connect()
            log.info("slack %s: connected over Socket Mode", self.name)
            return

    async def _on_envelope(self, client: Any, envelope: Any) -> None:
        await client.send_socket_mode_response({"envelope_id": envelope.envelope_id})  # ack at once
        await self._handle(envelope.type, envelope.payload)

    # --- inbound: HTTP mode --------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        if self.config.signing_secret is None or self.config.app_token is not None:
            return []
        return [
            Route("/interactivity", self._http_interactivity, methods=["POST"]),
            Route("/events", self._http_events, methods=["POST"]),
        ]

    async def _verified(self, http: HttpRequest) -> bytes | Response:
        """The raw body of a request Slack signed, or the response refusing it."""
        body = b""
        async for chunk in http.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return JSONResponse({"error": "body too large"}, status_code=413)
        from slack_sdk.signature import SignatureVerifier

        assert self.config.signing_secret is not None
        verifier = SignatureVerifier(self.config.signing_secret.get_secret_value())
        try:
            ok = verifier.is_valid(
                body, http.headers.get("x-slack-request-timestamp"), http.headers.get("x-slack-signature")
            )
        except (ValueError, UnicodeDecodeError):  # a timestamp that is not a number, a body not UTF-8
            ok = False
        if not ok:
            return JSONResponse({"error": "invalid or stale Slack signature"}, status_code=401)
        return body

    async def _http_interactivity(self, http: HttpRequest) -> Response:
        body = await self._verified(http)
        if isinstance(body, Response):
            return body
        try:
            payload = json.loads(parse_qs(body.decode())["payload"][0])
        except (KeyError, IndexError, ValueError):
            return JSONResponse({"error": "expected a form with a JSON payload"}, status_code=400)
        return Response(status_code=200, background=BackgroundTask(self._handle, "interactive", payload))

    async def _http_events(self, http: HttpRequest) -> Response:
        body = await self._verified(http)
        if isinstance(body, Response):
            return body
        try:
            data = json.loads(body)
        except ValueError:
            return JSONResponse({"error": "expected JSON"}, status_code=400)
        if data.get("type") == "url_verification":
            return JSONResponse({"challenge": data.get("challenge")})
        return Response(status_code=200, background=BackgroundTask(self._handle, "events_api", data))

    # --- inbound: both modes -------------------------------------------------------------------

    async def _handle(self, kind: str, payload: dict[str, Any]) -> None:
        try:
            if kind == "interactive" and payload.get("type") == "block_actions":
                await self._on_action(payload)
            elif kind == "events_api" and payload.get("type") == "event_callback":
                await self._on_event(payload)
        except Exception:
            log.exception("slack %s: could not process an inbound %s payload", self.name, kind)

    async def _on_action(self, payload: dict[str, Any]) -> None:
        action = (payload.get("actions") or [{}])[0]
        request_id = _request_id(action.get("block_id"))
        fields = _reply_fields(action)
        if request_id is None or fields is None:
            return  # not one of ours
        user = payload.get("user") or {}
        user_id = str(user.get("id", ""))
        once = payload.get("trigger_id") or f"{user_id}:{action.get('action_ts')}"
        if await self.state.seen(f"action:{once}"):
            return
        where = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
        who = f"@{user['username']} ({user_id})" if user.get("username") else user_id
        await self._answer(request_id, user_id, who, where, None, fields)

    async def _on_event(self, body: dict[str, Any]) -> None:
        event = body.get("event") or {}
        thread, ts, where = event.get("thread_ts"), event.get("ts"), event.get("channel")
        if event.get("type") != "message" or event.get("bot_id") or not event.get("user"):
            return
        if event.get("subtype") not in (None, "thread_broadcast") or not thread or thread == ts:
            return  # edits, joins, bots' messages; messages that are not thread replies
        if await self.state.seen(f"event:{body.get('event_id') or f'{where}:{ts}'}"):
            return
        request = await self._request_for(f"{where}:{thread}")
        if request is None or request.kind == Kind.NOTIFICATION:
            return
        user_id = str(event["user"])
        if request.kind == Kind.APPROVAL and allowed(user_id, self.allowed):
            await self.ignore(request.id, user_id, "thread reply to an approval")
            await self._tell(
                where,
                user_id,
                "An approval needs a button: press Approve or Deny on the message. "
                "A reply in the thread is not an approval.",
                thread,
            )
            return
        await self._answer(
            request.id, user_id, user_id, where, thread, {"text": _unescape(event.get("text", ""))}
        )

    async def _request_for(self, ref: str) -> Request | None:
        request = await self.find_by_ref(ref)
        if request is not None:
            return request
        where, _, ts = ref.partition(":")
        for candidate, delivery in await self.open_requests():  # a second direct message
            if [where, ts] in (delivery.detail.get("messages") or []):
                return candidate
        return None

    async def _answer(
        self,
        request_id: str,
        user_id: str,
        who: str,
        where: str | None,
        thread: str | None,
        fields: dict[str, str],
    ) -> None:
        if not allowed(user_id, self.allowed):
            reason = "not in allowed_users" if self.allowed else "allowed_users is not set"
            await self.ignore(request_id, who, reason)
            await self._tell(where, user_id, "You are not allowed to answer this request.", thread)
            return
        outcome = await self.answer(request_id, Reply(channel=self.name, responder=who, **fields))
        if not isinstance(outcome, Answered):  # the message itself shows the outcome once it is settled
            await self._tell(where, user_id, outcome.words, thread)


# ----------------------------------------------------------------------------------- the messages


def render(
    request: Request, public_url: str | None, mention: str | None, outcome: str | None = None
) -> list[dict[str, Any]]:
    """The Block Kit blocks for a request; with ``outcome``, the settled form (no buttons)."""
    rid = request.id
    blocks: list[dict[str, Any]] = [_header(request)]
    link = f"\n<{public_url}/requests/{rid}|Read the whole request in the inbox>" if public_url else ""
    lead = f"{mention} " if mention else ""
    if request.kind == Kind.APPROVAL:
        blocks.append(_section(f"{lead}*Action:* {_esc(request.text)}", link, raw=True))
        if request.details:
            blocks.append(_section(request.details, link))
        if request.payload is not None:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            blocks.append(_section(code, link, code=True))
    else:
        blocks.append(_section(lead + _esc(request.text), link, raw=True))
        if request.context:
            blocks.append(_section(request.context, link))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _context(request)}]})
    if outcome is not None:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": outcome}})
    elif request.kind == Kind.APPROVAL:
        approve: dict[str, Any] = _button("Approve", "approve", "approve", "primary")
        if request.risk == "high":
            approve["confirm"] = {
                "title": _plain_text("High-risk action"),
                "text": {"type": "mrkdwn", "text": "Approve it? The agent will go ahead at once."},
                "confirm": _plain_text("Approve"),
                "deny": _plain_text("Back"),
            }
        elements = [approve, _button("Deny", "deny", "deny", "danger")]
        blocks.append({"type": "actions", "block_id": f"hitl:{rid}:decision", "elements": elements})
    elif request.kind == Kind.QUESTION:
        if request.choices:
            elements = [_button(c, f"choice:{i}", c) for i, c in enumerate(request.choices)]
            blocks.append({"type": "actions", "block_id": f"hitl:{rid}:choices", "elements": elements})
        if request.allow_free_text:
            blocks.append(
                {
                    "type": "input",
                    "block_id": f"hitl:{rid}:text",
                    "dispatch_action": True,
                    "label": _plain_text("Your answer"),
                    "element": {
                        "type": "plain_text_input",
                        "action_id": "text",
                        "placeholder": _plain_text("Type, then press Enter; or reply in the thread"),
                        "dispatch_action_config": {"trigger_actions_on": ["on_enter_pressed"]},
                    },
                }
            )
    return blocks


_LEVELS = {
    "info": ":information_source:",
    "success": ":white_check_mark:",
    "warning": ":warning:",
    "error": ":rotating_light:",
}


def _header(request: Request) -> dict[str, Any]:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        text = f"{_LEVELS[level]} {request.title or level.capitalize()}"
    elif request.kind == Kind.APPROVAL:
        text = ":raised_hand: Approval needed" + (f" ({request.risk} risk)" if request.risk else "")
    else:
        text = f":question: {request.title or 'Question'}"
    return {"type": "header", "text": _plain_text(_clip(text, HEADER_LIMIT))}


def _section(text: str, link: str, *, raw: bool = False, code: bool = False) -> dict[str, Any]:
    """A section within Slack's 3,000 characters; a cut one links to the inbox when it can."""
    body = text if raw else _esc(text)
    fence = "```" if code else ""
    if code:
        body = _unfence(body)
    room = SECTION_LIMIT - 2 * len(fence)
    tail = ""
    if len(body) > room:
        tail = link or "\n_(cut: the whole text is in the hitl-mcp inbox)_"
        body = _clip_escaped(body, room - len(tail))
    return {"type": "section", "text": {"type": "mrkdwn", "text": f"{fence}{body}{fence}{tail}"}}


def _context(request: Request) -> str:
    parts = [f"From *{_esc(request.client_name or 'an agent')}*"]
    if request.expires_at is not None:
        parts.append(f"expires {_date(request.expires_at, '{date_short_pretty} at {time}')}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 `{request.payload_sha256[:12]}…`")
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        parts.append(f"if nobody answers: “{_esc(_clip(request.default_answer, 200))}”")
    parts.append(f"id `{request.short_id}`")
    return " · ".join(parts)


def _button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": _plain_text(_clip(text, BUTTON_LIMIT)),
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def outcome_line(request: Request, own: str) -> str:
    """What replaces the buttons once the request is settled, on any channel."""
    via = "Slack" if request.channel == own else _esc(request.channel or "?")
    who = _who(request.responder)
    when = _date(request.closed_at, "{time}") if request.closed_at else "an unknown time"
    comment = f"\n> {_esc(_clip(request.comment, 500))}" if request.comment else ""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        emoji = ":white_check_mark:" if request.approved else ":no_entry:"
        return f"{emoji} {verdict(request.approved).capitalize()} by {who} via {via} at {when}{comment}"
    if request.status == Status.ANSWERED:
        answer = _esc(_clip(request.answer or "", 500))
        return f":speech_balloon: Answered via {via} by {who} at {when}: “{answer}”{comment}"
    if request.status == Status.EXPIRED:
        return ":hourglass: " + expired(request, lambda answer: _esc(_clip(answer, 500)))
    if request.status == Status.CANCELLED:
        return f":wastebasket: Withdrawn by the agent{comment}"
    return f"Closed ({request.status.value})"


def _fallback(request: Request, mention: str | None) -> str:
    """The notification text (and what screen readers read)."""
    kind = {Kind.QUESTION: "Question", Kind.APPROVAL: "Approval needed", Kind.NOTIFICATION: "Notice"}
    lead = f"{mention} " if mention else ""
    return f"{lead}{kind[request.kind]}: {_esc(_clip(request.text, 300))}"


def _who(responder: str | None) -> str:
    if not responder:
        return "someone"
    match = _RESPONDER.fullmatch(responder)
    if match:
        return f"<@{match.group(1)}>"
    if _USER_ID.fullmatch(responder):
        return f"<@{responder}>"
    return _esc(responder)


def _mention(value: str | None) -> str | None:
    if value is None:
        return None
    if value in ("here", "channel", "everyone"):
        return f"<!{value}>"
    return f"<!subteam^{value}>" if value.startswith("S") else f"<@{value}>"


def _date(ts: float, fmt: str) -> str:
    fallback = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(ts)}^{fmt}|{fallback}>"


def _plain_text(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _unfence(text: str) -> str:
    """Text for inside a ``` block: Slack has no escape there, so a zero-width space goes after
    every backtick that another backtick follows, and at either end next to the fence: the text
    cannot close the block and show the rest of an action outside it."""
    text = re.sub(r"`(?=`)", "`\u200b", text)
    if text.startswith("`"):
        text = "\u200b" + text
    if text.endswith("`"):
        text += "\u200b"
    return text


def _esc(text: str) -> str:
    """Slack's mrkdwn escaping: the agent's text cannot ping @channel or forge a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _plain(mrkdwn: str) -> str:
    """A mrkdwn line as plain text for the fallback: dates and mentions by their readable parts."""
    return re.sub(r"<[!@][^|>]*\|([^>]*)>", r"\1", mrkdwn)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_escaped(text: str, limit: int) -> str:
    """Cut escaped mrkdwn without splitting an ``&amp;``-style entity."""
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _request_id(block_id: Any) -> str | None:
    if not isinstance(block_id, str) or not block_id.startswith("hitl:"):
        return None
    return block_id.split(":")[1] or None


def _reply_fields(action: Mapping[str, Any]) -> dict[str, str] | None:
    action_id, value = action.get("action_id"), action.get("value")
    if action_id in ("approve", "deny"):
        return {"decision": action_id}
    if isinstance(action_id, str) and action_id.startswith("choice:") and isinstance(value, str):
        return {"choice": value}
    if action_id == "text" and isinstance(value, str):
        return {"text": value}
    return None


# ----------------------------------------------------------------------------- talking to Slack


def _require_sdk() -> None:
    try:
        import aiohttp  # noqa: F401
        import slack_sdk  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


@functools.cache
def _rate_limit_handler_class() -> type:
    from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler

    class BoundedRateLimitRetry(AsyncRateLimitErrorRetryHandler):
        """Sleeps out a 429 inside the call only when Slack asks for a short wait."""

        async def _can_retry_async(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> bool:
            if response is None or response.status_code != 429:
                return False
            wait = retry_after(response.headers)
            return wait is not None and wait <= MAX_RATE_LIMIT_WAIT

    return BoundedRateLimitRetry


def _web_client(token: str, base_url: str) -> Any:
    from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
    from slack_sdk.web.async_client import AsyncWebClient

    handlers = [
        AsyncConnectionErrorRetryHandler(),
        _rate_limit_handler_class()(max_retry_count=RATE_LIMIT_RETRIES),
    ]
    return AsyncWebClient(token=token, base_url=base_url, timeout=15, retry_handlers=handlers)


#: Slack errors that a retry cannot fix, and what to do about each
_PERMANENT = {
    "invalid_auth": "Slack rejected the {token} (invalid_auth): check it",
    "not_authed": "no {token} was sent (not_authed)",
    "account_inactive": "the {token} belongs to a deleted app or a deactivated workspace",
    "token_revoked": "the {token} was revoked: reinstall the app and copy the new token",
    "token_expired": "the {token} has expired: reinstall the app and copy the new token",
    "not_allowed_token_type": "the {token} is the wrong kind of token (not_allowed_token_type)",
    "no_permission": "the {token} has no permission for this (no_permission)",
    "missing_scope": "the app lacks the scope {needed}: add it under OAuth & Permissions, then reinstall",
    "channel_not_found": "channel {target} was not found, or the bot cannot see it (invite it if private)",
    "not_in_channel": "the bot is not in channel {target}: invite it with /invite @your-bot",
    "is_archived": "channel {target} is archived",
    "restricted_action": "the workspace does not let the bot post in {target}",
    "user_not_found": "user {target} was not found",
    "user_disabled": "user {target} is deactivated",
    "cannot_dm_bot": "{target} is a bot and cannot get direct messages",
    "message_not_found": "the message to update is gone from {target}",
    "cant_update_message": "the message in {target} can no longer be updated",
    "edit_window_closed": "the message in {target} is past Slack's edit window",
}
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}


async def _call(
    pending: Any, method: str, config: Config, target: str | None = None, token: str = "bot_token"
) -> Any:
    """Await a Slack Web API call; failures become a ``DeliveryError`` with no secret in it."""
    import aiohttp
    from slack_sdk.errors import SlackApiError

    try:
        return await pending
    except SlackApiError as exc:
        raise _failure(exc.response, method, target, token) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        host = urlsplit(config.api_base_url).hostname
        raise DeliveryError(f"slack {method}: cannot reach {host}: {type(exc).__name__}") from None


def _failure(response: Any, method: str, target: str | None, token: str) -> DeliveryError:
    status = getattr(response, "status_code", None)
    data = response.data if isinstance(getattr(response, "data", None), dict) else {}
    code = str(data.get("error") or f"HTTP {status}")
    if status == 429 or code == "ratelimited":
        wait = retry_after(getattr(response, "headers", None)) or 30.0
        return DeliveryError(f"slack {method}: rate limited, retry in {wait:.0f}s", retry_after=wait)
    if code in _PERMANENT:
        needed = str(data.get("needed") or "needed")
        why = _PERMANENT[code].format(token=token, target=target or "?", needed=needed)
        return DeliveryError(f"slack {method}: {why}", permanent=True)
    if code in _TRANSIENT or (isinstance(status, int) and status >= 500):
        return DeliveryError(f"slack {method}: Slack answered {code}; will retry")
    return DeliveryError(f"slack {method}: Slack answered {code}", permanent=True)
