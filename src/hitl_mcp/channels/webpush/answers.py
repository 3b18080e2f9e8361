"""Web Push: answers coming back. Approve and Deny each carry a token signed for one request, one
decision, one person and one device (HMAC, a key in the state directory); the service worker posts
it to ``/webhooks/<name>/answer``. It is used once, until the request's deadline, and only while the
device is turned on; the answer is the person's, as if given in the inbox."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Answered, Unknown
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.webpush.config import MAX_ANSWER_BODY, TOKEN_DAYS, Config
from hitl_mcp.channels.webpush.devices import Device
from hitl_mcp.core.models import Decision, Reply, Request, now
from hitl_mcp.kit.net import read_within
from hitl_mcp.kit.signing import SecretFile, Signer, b64url, unb64url

__all__ = ["Answers"]


class Answers(BaseChannel):
    """The channel's inbound half: the tokens and the answer route."""

    config: Config
    _signer_cache: Signer | None = None

    if TYPE_CHECKING:  # WebPushChannel's

        async def devices(self) -> list[Device]: ...

    @property
    def signer(self) -> Signer:
        if self._signer_cache is None:
            secret = SecretFile(
                self.hub.state_dir, f"webpush-{self.name}.key", holds="the key that signs push buttons"
            ).get()
            self._signer_cache = Signer(secret.encode(), f"webpush-answer:{self.name}")
        return self._signer_cache

    @property
    def answer_path(self) -> str:
        return f"/webhooks/{self.name}/answer"

    def issue(self, request: Request, decision: str, device: Device) -> str:
        """A token for one decision on one request, by the device's person, until the deadline."""
        expires = request.expires_at if request.expires_at is not None else now() + TOKEN_DAYS * 86400
        person = b64url((device.person or "").encode())
        return self.signer.issue(request.id, decision, person, device.id, str(int(expires)))

    async def take(self, request_id: str, token: str) -> tuple[int, str]:
        """Check a token and hand its answer to the broker: an HTTP status and the words to show."""
        parts = self.signer.read(token, 5) if len(token) < 1000 else None
        if parts is None:
            self.log.warning("%s: refused a forged or damaged answer token", self.name)
            return 403, "Not recorded: this button is not valid."
        bound, decision, encoded, device_id, expires, nonce = parts
        person = unb64url(encoded).decode(errors="replace")
        if bound != request_id:
            await self.ignore(request_id, person, "push token is for another request", token_for=bound)
            return 403, "Not recorded: this button is for another request."
        if not expires.isdigit() or int(expires) < now():
            await self.ignore(request_id, person, "push token expired", answer=decision)
            return 410, "Not recorded: this button has expired."
        if not any(d.id == device_id and d.person == person for d in await self.devices()):
            await self.ignore(request_id, person, "push token of a removed device", answer=decision)
            return 403, "Not recorded: notifications were turned off on this device."
        if decision not in ("approve", "deny"):
            return 403, "Not recorded: this button is not valid."
        if await self.state.seen(f"token:{nonce}"):
            await self.ignore(request_id, person, "push token already used", answer=decision)
            return 409, "Not recorded: this button was already used."
        said: Decision = "approve" if decision == "approve" else "deny"
        outcome = await self.answer(
            request_id, Reply(channel=self.name, responder=person, identity=person, decision=said)
        )
        if isinstance(outcome, Answered):
            return 200, outcome.words
        if isinstance(outcome, Unknown):
            return 404, outcome.words
        return 409, outcome.words  # Late or Invalid

    def routes(self) -> list[BaseRoute]:
        return [Route("/answer", self._answer_endpoint, methods=["POST"])]

    async def _answer_endpoint(self, http: HttpRequest) -> Response:
        body = await read_within(http.stream(), MAX_ANSWER_BODY)
        if body is None:
            return JSONResponse({"error": "body too large"}, status_code=413)
        try:
            data = json.loads(body or b"null")
        except (ValueError, RecursionError):
            data = None
        request_id = data.get("request") if isinstance(data, dict) else None
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(request_id, str) or not isinstance(token, str):
            return JSONResponse({"error": 'expected {"request": id, "token": token}'}, status_code=400)
        status, words = await self.take(request_id, token)
        return JSONResponse({"message": words}, status_code=status)
