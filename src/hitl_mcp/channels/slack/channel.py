"""Slack: the channel (sending, retracting, and answers over Socket Mode or signed HTTP)."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Answered, ChannelConfig, Counted, Delivery, DeliveryError, allowed
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.fitting import Room
from hitl_mcp.channels.slack.api import _call, _require_sdk, _web_client
from hitl_mcp.channels.slack.blocks import (
    ROOM,
    ReplyFields,
    _clip,
    _esc,
    _fallback,
    _mention,
    _plain,
    _reply_fields,
    _request_id,
    _unescape,
    outcome_line,
    render_for,
)
from hitl_mcp.channels.slack.config import MAX_BODY, SOCKET_RETRY, Config, log
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.core.wording import still_waiting
from hitl_mcp.kit.net import read_within

# --------------------------------------------------------------------------------------- the channel


class SlackChannel(BaseChannel):
    type = "slack"
    webhook_alias = "slack"
    extra = "slack"
    config: Config

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("slack_sdk", "aiohttp")

    def __init__(self, name: str, config: ChannelConfig, hub: Any) -> None:
        super().__init__(name, config, hub)
        self._client: Any = None
        self._socket: Any = None
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
        # one Socket Mode connection among the processes sharing the store (replicas)
        self.in_background(self._socket_mode, exclusive=True)

    async def close(self) -> None:
        await self.stop_background()

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

    def preview_room(self) -> Room:
        return ROOM

    async def deliver(self, request: Request) -> Delivery:
        _require_sdk()
        if request.kind != Kind.NOTIFICATION:
            problem = self._why_unanswerable()
            if problem:
                raise DeliveryError(f"not sent: {problem}", permanent=True)
        mention = _mention(self.config.mention)
        blocks = render_for(self, request, mention)
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

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A reply in the thread of each message the request was posted as (its buttons stay there)."""
        messages = delivery.detail.get("messages") or ([delivery.ref.split(":", 1)] if delivery.ref else [])
        if not messages:
            return await super().remind(request, delivery, key)
        text = ":alarm_clock: " + _esc(still_waiting(_clip(request.text, 300)))
        for where, ts in messages:
            await _call(
                self._web().chat_postMessage(channel=where, thread_ts=ts, text=text, unfurl_links=False),
                "chat.postMessage",
                self.config,
                where,
            )
        return Delivery()

    async def retract(self, request: Request, delivery: Delivery) -> None:
        messages = delivery.detail.get("messages") or ([delivery.ref.split(":", 1)] if delivery.ref else [])
        line = outcome_line(request, self.name)
        blocks = render_for(self, request, None, outcome=line)
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

    async def _socket_mode(self) -> None:
        """Socket Mode while this process runs it: connected, then kept open until cancelled."""
        try:
            if await self._run_socket():
                await anyio.sleep_forever()
        finally:
            client, self._socket = self._socket, None
            if client is not None:
                with anyio.move_on_after(5, shield=True):
                    await client.close()

    async def _run_socket(self) -> bool:
        """Open the Socket Mode connection; the SDK keeps it open (and reconnects on drops). False
        when Slack refused it for good (logged)."""
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
                    return False
                delay = SOCKET_RETRY.delay(attempt)
                log.warning("slack %s: Socket Mode: %s; retrying in %.0fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                continue
            client.wss_uri = opened["url"]
            # slack_sdk leaves SocketModeClient.connect unannotated
            await client.connect()  # type: ignore[no-untyped-call]
            log.info("slack %s: connected over Socket Mode", self.name)
            return True

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
        body = await read_within(http.stream(), MAX_BODY)
        if body is None:
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
        fields: ReplyFields,
    ) -> None:
        if not allowed(user_id, self.allowed):
            reason = "not in allowed_users" if self.allowed else "allowed_users is not set"
            await self.ignore(request_id, who, reason)
            await self._tell(where, user_id, "You are not allowed to answer this request.", thread)
            return
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=who, identity=user_id, **fields)
        )
        # the message itself shows the outcome once it is settled; a quorum's vote is told at once
        if not isinstance(outcome, Answered) or isinstance(outcome, Counted):
            await self._tell(where, user_id, outcome.words, thread)
