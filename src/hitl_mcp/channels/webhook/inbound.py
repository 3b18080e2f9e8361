"""Signed webhook: checking a signed answer (headers, window, signature) and reading its body.

Every refusal is a :class:`Refusal`: an HTTP status, a short machine code and one sentence, answered
as ``{"ok": false, "error": sentence, "code": code}`` (the shape of the server's other JSON errors).
The headers are checked here before the library sees them, so that a malformed one is a 400 with a
reason rather than the library's ``ValueError`` (a 500), and a stale one says by how much.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.responses import JSONResponse

from hitl_mcp.channels.webhook.config import TOLERANCE

#: one signature: a version, a comma, base64 (the spec's v1 is HMAC-SHA256; v1a, ed25519, is skipped)
_SIGNATURE = re.compile(r"v1a?,[A-Za-z0-9+/]+={0,2}")
_ID = re.compile(r"[\x21-\x7e]{1,255}")  # printable, no spaces


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str

    def response(self, **extra: Any) -> JSONResponse:
        return JSONResponse({"ok": False, "error": self.message, "code": self.code, **extra}, self.status)


UNSIGNED = Refusal(
    401, "unsigned", "missing the Standard Webhooks headers webhook-id, webhook-timestamp, webhook-signature"
)
FORGED = Refusal(
    401,
    "bad_signature",
    "the signature does not match: sign '<webhook-id>.<webhook-timestamp>.<raw body>' "
    "with this channel's secret",
)
REPLAYED = Refusal(409, "replayed", "this webhook-id was seen before: a replay is not processed again")


def verify(secret: str, body: bytes, headers: Mapping[str, str], now: float | None = None) -> str | Refusal:
    """The ``webhook-id`` of a fresh, correctly signed message, or why it is refused."""
    message_id = headers.get("webhook-id")
    stamp = headers.get("webhook-timestamp")
    signature = headers.get("webhook-signature")
    if not (message_id and stamp and signature):
        return UNSIGNED
    if not _ID.fullmatch(message_id):
        return Refusal(400, "malformed", "webhook-id must be 1 to 255 printable characters without spaces")
    if not stamp.isascii() or not stamp.isdigit():
        return Refusal(400, "malformed", "webhook-timestamp must be whole seconds since the epoch (UTC)")
    off = int(stamp) - (time.time() if now is None else now)
    if abs(off) > TOLERANCE:
        side = "behind" if off < 0 else "ahead of"
        return Refusal(
            401,
            "stale",
            f"webhook-timestamp is {abs(off):.0f}s {side} this server's clock; at most {TOLERANCE}s is "
            "accepted (sign each attempt afresh, and check the sender's clock)",
        )
    if not all(_SIGNATURE.fullmatch(part) for part in signature.split()):
        return Refusal(400, "malformed", "webhook-signature must be space-separated v1,<base64> signatures")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(400, "bad_body", "the body must be JSON in UTF-8")
    from standardwebhooks import Webhook, WebhookVerificationError

    sent = {"webhook-id": message_id, "webhook-timestamp": stamp, "webhook-signature": signature}
    try:
        Webhook(secret).verify(text, sent, json_parse=False)
    except (WebhookVerificationError, ValueError):  # ValueError: base64 the library cannot decode
        return FORGED
    return message_id


class Answer(BaseModel):
    """What an integrator POSTs to ``/webhooks/<name>/reply`` (docs/channels/webhook/reply.schema.json)."""

    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=64)
    responder: str = Field(min_length=1, max_length=200)
    decision: Literal["approve", "deny"] | None = None
    choice: str | None = Field(None, max_length=2000)
    text: str | None = Field(None, max_length=20000)
    comment: str | None = Field(None, max_length=4000)

    @field_validator("responder")
    @classmethod
    def _responder(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name who answered")
        return value.strip()


def read_answer(body: bytes) -> Answer | Refusal:
    """The answer a verified body holds, or a 400 saying which field is wrong (values not quoted)."""
    try:
        return Answer.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            return Refusal(400, "bad_body", "the body is not JSON")
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        return Refusal(400, "bad_body", f"the answer does not fit: {problems}")
