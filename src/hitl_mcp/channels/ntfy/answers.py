"""ntfy: answers coming back. Each button carries a signed token for one request and one answer; it
comes back through the reply topic (a JSON stream the server keeps open) or, with a public URL,
straight to ``/webhooks/<name>/answer``. Either way the token is checked the same way."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Answered, Invalid, Late, Unknown
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.ntfy.compose import answer_of
from hitl_mcp.channels.ntfy.config import MAX_ANSWER_BODY, STREAM_RETRY, Config
from hitl_mcp.core.models import Reply, Request, now
from hitl_mcp.core.retry import RetryPolicy, retry_after
from hitl_mcp.kit.net import read_within
from hitl_mcp.kit.signing import SecretFile, Signer

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger("hitl_mcp.channels.ntfy")

#: the key a button's JSON body carries its token under
TOKEN_FIELD = "hitl"


@dataclass(frozen=True)
class Taken:
    """What became of one answer: an HTTP status for the webhook route, and the words."""

    status: int
    words: str


class _StreamFailed(Exception):
    """The server refused the subscription (a status other than 200)."""

    def __init__(self, status: int, wait: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.wait = wait


def token_of(text: str) -> str | None:
    """The token in a button's body (``{"hitl": "<token>"}``), or None when the text is not one.
    ntfy keeps a text body verbatim as the message, so this is the same on either path."""
    if len(text) > MAX_ANSWER_BODY:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    token = data.get(TOKEN_FIELD) if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


class _Answers(BaseChannel):
    """The ntfy channel's inbound half: tokens, the reply-topic subscription, the webhook route."""

    config: Config
    #: how the subscription backs off after a drop; tests shorten it
    stream_retry: RetryPolicy = STREAM_RETRY
    #: seconds without a line (ntfy sends a keepalive every 45 s by default) before reconnecting
    stream_idle: float = 120.0

    if TYPE_CHECKING:  # NtfyChannel's

        def _client_or_new(self) -> Any: ...
        def _headers(self) -> dict[str, str]: ...

    _signer_cache: Signer | None = None

    # --- tokens -------------------------------------------------------------------------------

    @property
    def signer(self) -> Signer:
        """MACs answer tokens under this channel's key (``ntfy-<name>.key`` in the state dir)."""
        if self._signer_cache is None:
            secret = SecretFile(
                self.hub.state_dir, f"ntfy-{self.name}.key", holds="the key that signs ntfy answer buttons"
            ).get()
            self._signer_cache = Signer(secret.encode(), f"ntfy-answer:{self.name}")
        return self._signer_cache

    def issue(self, request: Request, code: str) -> str:
        """A token for one answer to one request, valid until the request expires."""
        expires = str(int(request.expires_at)) if request.expires_at is not None else "0"
        return self.signer.issue(request.id, code, expires)

    async def take(self, text: str) -> Taken:
        """Check an answer's token, then resolve the request through the broker. A token that is
        expired, used before or does not fit is audited and changes nothing; a forged one is logged."""
        who = self.config.responder
        token = token_of(text)
        if token is None:
            return Taken(400, "not an answer from a hitl-mcp button")
        parts = self.signer.read(token, 3)
        if parts is None:
            # logged, not audited: anyone who can write to the topic could send it, and only what
            # carries our signature may write to the audit log
            log.warning("ntfy %s: refused a forged or damaged answer token", self.name)
            return Taken(403, "Not recorded: this answer's token is not valid.")
        request_id, code, expires, nonce = parts
        if expires.isdigit() and int(expires) and int(expires) < now():
            await self.ignore(request_id, who, "answer token expired", answer=code)
            return Taken(410, "Not recorded: this request has expired.")
        request = await self.hub.get(request_id)
        fields = answer_of(request, code) if request is not None else None
        if request is None or fields is None:
            await self.ignore(request_id, who, "answer token does not fit any request", answer=code)
            return Taken(404, Unknown(request_id).words)
        if await self.state.seen(f"token:{nonce}"):
            await self.ignore(request_id, who, "answer token already used", answer=code)
            return Taken(409, "Not recorded: this button was already used.")
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=who, identity=who, **fields)
        )
        match outcome:
            case Answered():
                return Taken(200, outcome.words)
            case Late() | Invalid():
                return Taken(409, outcome.words)
        return Taken(404, outcome.words)

    # --- with a public URL: the webhook ---------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route("/answer", self._answer_endpoint, methods=["POST"])]

    async def _answer_endpoint(self, http: HttpRequest) -> Response:
        body = await read_within(http.stream(), MAX_ANSWER_BODY)
        if body is None:
            return JSONResponse({"error": "body too large"}, status_code=413)
        try:
            text = body.decode()
        except UnicodeDecodeError:
            return JSONResponse({"error": "expected a JSON body"}, status_code=400)
        taken = await self.take(text)
        return JSONResponse({"message": taken.words}, status_code=taken.status)

    # --- without one: the reply topic ---------------------------------------------------------

    async def subscribe_forever(self) -> None:
        """Keep a subscription to the reply topic open, from the last message handled on (``since``,
        kept in the store): a drop, a restart or a server that was away loses no answer."""
        if not await self.state.get("since"):
            # the first start: answers can only be to requests delivered from now on
            await self.state.set("since", str(int(now())))
        attempt = 0
        while True:
            wait: float | None = None
            try:
                if await self._stream_once():
                    attempt = 0
            except _StreamFailed as exc:
                wait = exc.wait
                log.warning("ntfy %s: the reply topic refused the subscription (%s)", self.name, exc)
            except Exception as exc:  # a drop, a timeout, a server away: reconnect
                log.warning("ntfy %s: reply stream lost: %s", self.name, type(exc).__name__)
            attempt += 1
            delay = wait if wait is not None else self.stream_retry.delay(attempt)
            await anyio.sleep(delay)

    async def _stream_once(self) -> bool:
        """Read the reply topic's JSON stream until it ends; whether it was opened at all."""
        import httpx2

        since = await self.state.get("since") or "all"
        url = f"{self.config.server}/{self.config.replies}/json"
        timeout = httpx2.Timeout(15.0, read=self.stream_idle)
        client: httpx2.AsyncClient = self._client_or_new()
        async with client.stream(
            "GET", url, params={"since": since}, headers=self._headers(), timeout=timeout
        ) as response:
            if response.status_code != 200:
                raise _StreamFailed(response.status_code, retry_after(response.headers))
            opened = False
            async for line in response.aiter_lines():
                opened = True
                await self._on_line(line)
            return opened

    async def _on_line(self, line: str) -> None:
        try:
            event = json.loads(line) if line.strip() else None
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("event") != "message":
            return  # open, keepalive, poll_request
        message_id = event.get("id")
        text = event.get("message")
        if isinstance(text, str) and token_of(text) is not None:
            taken = await self.take(text)
            log.info("ntfy %s: an answer from the reply topic: %s", self.name, taken.words)
        if isinstance(message_id, str) and message_id:
            await self.state.set("since", message_id)  # after handling: a crash re-reads, never skips
