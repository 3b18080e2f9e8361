"""ntfy: the channel (publishing, updating a settled notification, ``check``); answers are in
``answers.py``."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2

from hitl_mcp.channels.base import ChannelConfig, Delivery, DeliveryError, Hub
from hitl_mcp.channels.fitting import INBOX_ACTION, Room, approve_here, shown
from hitl_mcp.channels.ntfy.answers import TOKEN_FIELD, _Answers, log
from hitl_mcp.channels.ntfy.compose import (
    buttons,
    inbox_link,
    message,
    priority,
    settled,
    tags,
    title,
)
from hitl_mcp.channels.ntfy.config import HTTP_TIMEOUT, PREVIEW_BYTES, Config
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.core.retry import retry_after

#: when a 429 names no Retry-After: ntfy's default refills one request every 5 s
DEFAULT_RATE_WAIT = 10.0


class NtfyChannel(_Answers):
    type = "ntfy"
    config: Config
    http_timeout: float = HTTP_TIMEOUT

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self._client: httpx2.AsyncClient | None = None

    # --- life cycle -------------------------------------------------------------------------

    @property
    def via_reply_topic(self) -> bool:
        """Whether answers come back through the reply topic (no public URL) or the webhook."""
        return not self.public_url

    async def start(self) -> None:
        self._client = self._new_client()
        if self.via_reply_topic:
            self.in_background(self.subscribe_forever, exclusive=True)  # one subscriber among replicas

    async def close(self) -> None:
        await self.stop_background()
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    def _new_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=self.http_timeout, follow_redirects=False)

    def _client_or_new(self) -> httpx2.AsyncClient:
        if self._client is None:
            raise RuntimeError("the channel is not started")
        return self._client

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[httpx2.AsyncClient]:
        """The started channel's client, or one for this call only (``check``, ``test-channel``)."""
        if self._client is not None:
            yield self._client
            return
        client = self._new_client()
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    def _headers(self) -> dict[str, str]:
        """The server's own credentials; never put into a notification."""
        c = self.config
        if c.token is not None:
            return {"Authorization": f"Bearer {c.token.get_secret_value()}"}
        if c.username is not None and c.password is not None:
            pair = f"{c.username}:{c.password.get_secret_value()}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    @property
    def _host(self) -> str:
        return urlsplit(self.config.server).netloc

    # --- check ------------------------------------------------------------------------------

    async def check(self) -> str:
        c = self.config
        async with self._http() as client:
            try:
                health = await client.get(f"{c.server}/v1/health")
                poll = await client.get(
                    f"{c.server}/{c.replies}/json",
                    params={"poll": "1", "since": "latest"},
                    headers=self._headers(),
                )
            except httpx2.HTTPError as exc:
                raise DeliveryError(f"ntfy: cannot reach {self._host}: {type(exc).__name__}") from None
        if health.status_code == 200 and _json(health).get("healthy") is False:
            raise DeliveryError(f"ntfy: {self._host} reports that it is not healthy")
        parts = [f"ok: ntfy server {self._host} is reachable"]
        if health.status_code == 404:
            parts[0] += " (no /v1/health: an older server)"
        if poll.status_code in (401, 403):
            parts.append(
                f"warning: the server refuses to let this channel read the reply topic (HTTP "
                f"{poll.status_code}): without a public URL, answers cannot come back; give the token "
                "read access to it"
            )
        elif poll.status_code != 200:
            parts.append(f"warning: reading the reply topic failed (HTTP {poll.status_code})")
        else:
            parts.append("answers come back through the reply topic, or the webhook with a public URL")
        parts.append("publishing is tried by test-channel")
        return "; ".join(parts)

    # --- sending ----------------------------------------------------------------------------

    def preview_room(self) -> Room:
        """A preview goes out only with ``show_payload`` (a topic may be public): else none fits."""
        return Room(PREVIEW_BYTES if self.config.show_payload else 0, "bytes")

    async def deliver(self, request: Request) -> Delivery:
        link = inbox_link(request, self.public_url)
        body: dict[str, Any] = {
            "topic": self.config.topic,
            "title": title(request),
            "message": message(request, self.config, self.public_url, shown(self, request)),
            "tags": tags(request),
            "priority": priority(request, self.config),
        }
        if request.kind != Kind.NOTIFICATION:
            body["sequence_id"] = request.id  # the settled update replaces this notification
            actions = self._actions(request, link)
            if actions:
                body["actions"] = actions
        if link:
            body["click"] = link
        sent = await self._publish(body)
        detail: dict[str, Any] = {"id": sent.get("id")}
        if sent.get("sequence_id") == request.id:  # ntfy 2.16 or later: it can be updated in place
            detail["sequence_id"] = request.id
        return Delivery(ref=str(sent.get("id") or "") or None, detail=detail)

    def _actions(self, request: Request, link: str | None) -> list[dict[str, Any]]:
        """``http`` buttons, one per answer, each with its own signed token; for free text or too
        many choices, a ``view`` button to the inbox when there is one."""
        approve = approve_here(self, request) is None
        offered = buttons(request, approve)
        inbox = [{"action": "view", "label": INBOX_ACTION, "url": link}] if link and not approve else []
        if not offered:
            return [{"action": "view", "label": "Answer in the inbox", "url": link}] if link else []
        if self.via_reply_topic:
            url = f"{self.config.server}/{self.config.replies}"
            headers = {"Content-Type": "text/plain"}
            if self.config.reply_token is not None:
                headers["Authorization"] = f"Bearer {self.config.reply_token.get_secret_value()}"
        else:
            url = f"{self.public_url}/webhooks/{self.name}/answer"
            headers = {"Content-Type": "application/json"}
        return inbox + [
            {
                "action": "http",
                "label": button.label,
                "url": url,
                "method": "POST",
                "headers": headers,
                "body": json.dumps({TOKEN_FIELD: self.issue(request, button.code)}),
                "clear": True,
            }
            for button in offered
        ]

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """Replace the notification with the outcome (same sequence id); on a server too old for
        that, the same text arrives as a follow-up notification."""
        if request.kind == Kind.NOTIFICATION:
            return
        body = settled(request, self.config, self.config.topic)
        if not delivery.detail.get("sequence_id"):
            del body["sequence_id"]
        await self._publish(body)

    async def _publish(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a JSON message to the server's root; failures become a ``DeliveryError`` that names
        neither the topic nor a credential."""
        async with self._http() as client:
            try:
                response = await client.post(f"{self.config.server}/", json=body, headers=self._headers())
            except httpx2.HTTPError as exc:
                raise DeliveryError(f"ntfy: cannot reach {self._host}: {type(exc).__name__}") from None
        status = response.status_code
        if status == 200:
            return _json(response)
        why = _json(response).get("error")
        said = f" ({why})" if isinstance(why, str) and why else ""
        if status == 429:
            wait = retry_after(response.headers) or DEFAULT_RATE_WAIT
            log.warning("ntfy %s: rate limited by %s; retrying in %.0fs", self.name, self._host, wait)
            raise DeliveryError(f"ntfy: rate limited by {self._host} (HTTP 429)", retry_after=wait)
        if status in (401, 403):
            raise DeliveryError(
                f"ntfy: {self._host} refused to publish (HTTP {status}{said}): check token or "
                "username/password, and that they may write the topic",
                permanent=True,
            )
        if status >= 500:
            raise DeliveryError(f"ntfy: {self._host} answered HTTP {status}; will retry")
        raise DeliveryError(f"ntfy: {self._host} refused the message (HTTP {status}{said})", permanent=True)


def _json(response: httpx2.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
