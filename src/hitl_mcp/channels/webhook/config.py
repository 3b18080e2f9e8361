"""Signed webhook: the channel's config block (the receiver's URL, the shared secret, who may answer)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.durations import bounded

INSTALL_HINT = "the webhook channel needs standardwebhooks: pip install 'mcp-hitl[webhook]'"
#: Standard Webhooks: a receiver refuses a message whose timestamp is further off than this
TOLERANCE = 300
#: the largest signed answer read (an answer is a few fields; a comment at most a few KiB)
MAX_BODY = 64 * 1024
SECRET_HELP = (
    "expected a Standard Webhooks secret: whsec_ followed by the base64 of 24 to 64 random bytes; make "
    "one with: python -c \"import base64, secrets; print('whsec_' + "
    'base64.b64encode(secrets.token_bytes(32)).decode())"'
)

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def secret_bytes(secret: str) -> bytes | None:
    """The key a ``whsec_`` secret holds, or None when it is not one (24 to 64 bytes, as the spec
    asks; the library itself takes any text and decodes what it can)."""
    if not secret.startswith("whsec_"):
        return None
    encoded = secret.removeprefix("whsec_")
    if not _BASE64.fullmatch(encoded):
        return None
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if 24 <= len(key) <= 64 else None


class Config(ChannelConfig):
    type: Literal["webhook"] = "webhook"
    url: str
    """Where events are POSTed (an n8n or Zapier webhook trigger, your own bot)."""
    secret: SecretStr
    """The Standard Webhooks secret (``whsec_…``) both ways: events are signed with it, and so must
    answers be."""
    allowed_responders: list[str] | None = None
    """When set, an answer's ``responder`` must be one of these. Unset: the integrator, who holds the
    secret, is trusted to say who answered (the audit log records that it was only asserted)."""
    timeout: Annotated[float, bounded(0.1, 25)] = 10.0
    """Seconds to wait for the receiver's answer; a timeout is retried (the outbox allows 30 s)."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://n8n.example.com/webhook/hitl")
        return value

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: SecretStr) -> SecretStr:
        if secret_bytes(value.get_secret_value().strip()) is None:
            raise ValueError(SECRET_HELP)
        return SecretStr(value.get_secret_value().strip())

    @field_validator("allowed_responders")
    @classmethod
    def _responders(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("name at least one responder, or leave allowed_responders out")
        if value is not None and any(not name.strip() for name in value):
            raise ValueError("a responder must not be empty")
        return value

    @property
    def origin(self) -> str:
        """The receiver as messages name it: scheme, host and port only. A webhook URL's path often
        is its credential (Zapier's catch hooks, n8n's webhook ids), so it is never shown."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
