"""Pushover: the channel. Pages (``messages.json``), cancels the page on settle (``receipts/<r>/cancel``),
and records an acknowledgement as ``seen``, from the receipt (polled) or Pushover's callback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Channel, ChannelConfig, Delivery, DeliveryError, Hub
from hitl_mcp.channels.pushover.config import HTTP_TIMEOUT, MESSAGE_LIMIT, PRIORITIES, TITLE_LIMIT, Config
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.core.retry import retry_after

__all__ = ["SEEN", "PushoverChannel"]

#: the audit event of an acknowledged page: seen, not answered
SEEN = "seen"
#: the largest callback body taken
MAX_CALLBACK = 4096


class PushoverChannel(Channel):
    type = "pushover"
    #: a page cannot take an answer: the person answers in the inbox or on another channel
    answerable = False
    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self._client: httpx2.AsyncClient | None = None

    async def start(self) -> None:
        self._client = httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False)
        if self.config.priority == "emergency":
            self.in_background(self.poll_forever, exclusive=True)

    async def close(self) -> None:
        await self.stop_background()
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    @contextlib.asynccontextmanager
    async def _http(self) -> AsyncIterator[httpx2.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        client = httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _call(self, method: str, path: str, **fields: Any) -> dict[str, Any]:
        """One API call, with the token; Pushover's own error words on a refusal (never the token)."""
        data = {"token": self.config.token.get_secret_value(), **fields}
        url = f"{self.config.api_base}/1/{path}"
        async with self._http() as client:
            try:
                if method == "GET":
                    response = await client.get(url, params=data)
                else:
                    response = await client.post(url, data=data)
            except httpx2.HTTPError as exc:
                raise DeliveryError(f"pushover: cannot reach the API: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        status = response.status_code
        if status == 429 or status >= 500:
            raise DeliveryError(f"pushover: HTTP {status}", retry_after=retry_after(response.headers))
        if status != 200 or body.get("status") != 1:
            errors = body.get("errors")
            listed = [str(e) for e in errors] if isinstance(errors, list) else []
            said = "; ".join(listed)[:300] or f"HTTP {status}"
            raise DeliveryError(f"pushover refused: {said}", permanent=True)
        return body

    # --- the protocol ----------------------------------------------------------------------

    async def check(self) -> str:
        body = await self._call("POST", "users/validate.json", user=self.config.user)
        devices = body.get("devices") or []
        return f"ok: the user key is valid ({len(devices)} device(s))"

    async def deliver(self, request: Request) -> Delivery:
        c = self.config
        fields: dict[str, Any] = {
            "user": c.user,
            "title": _clip(title(request), TITLE_LIMIT),
            "message": _clip(message(request), MESSAGE_LIMIT),
            "priority": PRIORITIES[c.priority] if request.kind != Kind.NOTIFICATION else 0,
        }
        if self.public_url:
            fields.update(
                url=f"{self.public_url.rstrip('/')}/requests/{request.id}", url_title="Open in hitl-mcp"
            )
        if c.device:
            fields["device"] = c.device
        if c.sound:
            fields["sound"] = c.sound
        if fields["priority"] == 2:
            fields.update(retry=c.retry, expire=c.expire, tags=f"hitl-{request.id}")
            if self.public_url:
                fields["callback"] = f"{self.public_url.rstrip('/')}/webhooks/{self.name}/callback"
        body = await self._call("POST", "messages.json", **fields)
        receipt = body.get("receipt")
        return Delivery(ref=str(receipt) if receipt else None, detail={"receipt": receipt} if receipt else {})

    @property
    def retracts(self) -> bool:
        return self.config.priority == "emergency"

    async def retract(self, request: Request, delivery: Delivery) -> None:
        """The request is settled: stop paging."""
        if delivery.ref:
            await self._call("POST", f"receipts/{delivery.ref}/cancel.json")

    # --- acknowledgements ------------------------------------------------------------------

    async def poll_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception as exc:  # an API away: try again next round
                self.log.warning("%s: reading receipts failed: %s", self.name, exc)
            await anyio.sleep(self.config.poll_seconds)

    async def poll_once(self) -> None:
        for request, delivery in await self.open_requests():
            if delivery.ref and not await self.state.get(f"seen:{request.id}"):
                await self.acknowledged(request, delivery.ref)

    async def acknowledged(self, request: Request, receipt: str) -> bool:
        """Read the receipt; when it is acknowledged, record ``seen`` once. Whether it was."""
        body = await self._call("GET", f"receipts/{receipt}.json")
        if body.get("acknowledged") != 1:
            return False
        if await self.state.seen(f"ack:{receipt}"):
            return True
        await self.state.set(f"seen:{request.id}", "1")
        who = str(body.get("acknowledged_by") or "?")
        await self.hub.record(
            request.id,
            SEEN,
            f"pushover {who}",
            {
                "channel": self.name,
                "device": body.get("acknowledged_by_device"),
                "acknowledged_at": body.get("acknowledged_at"),
                "counts_as_answer": False,
            },
        )
        return True

    def routes(self) -> list[BaseRoute]:
        return [Route("/callback", self._callback, methods=["POST"])]

    async def _callback(self, http: HttpRequest) -> Response:
        """Pushover's callback. Not signed: it only names a receipt, which is read back from the API."""
        body = await http.body()
        if len(body) > MAX_CALLBACK:
            return JSONResponse({"error": "body too large"}, status_code=413)
        form = await http.form()
        receipt = form.get("receipt")
        if not isinstance(receipt, str) or not receipt.isalnum() or len(receipt) > 64:
            return JSONResponse({"error": "no receipt"}, status_code=400)
        request = await self.find_by_ref(receipt)
        if request is None:
            return JSONResponse({"error": "unknown receipt"}, status_code=404)
        try:
            seen = await self.acknowledged(request, receipt)
        except DeliveryError as exc:
            return JSONResponse({"error": str(exc)}, status_code=502)
        return JSONResponse({"seen": seen})


def title(request: Request) -> str:
    if request.kind == Kind.APPROVAL:
        return "Approval needed" + (f" ({request.risk} risk)" if request.risk else "")
    if request.kind == Kind.QUESTION:
        return request.title or "Question"
    return request.title or (request.level or "info").capitalize()


def message(request: Request) -> str:
    where = "Answer in the hitl-mcp inbox" if request.kind != Kind.NOTIFICATION else ""
    parts = [request.text.strip(), where, f"From {request.client_name or 'an agent'} · id {request.short_id}"]
    return "\n\n".join(p for p in parts if p)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
