"""Web Push: the channel's config block and its limits."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.retry import RetryPolicy

#: what a push service must take (RFC 8030 §7.2: at least 4,096 bytes of encrypted body); the
#: aes128gcm header (86 bytes), the padding delimiter (1) and the tag (16) leave this for the JSON
PAYLOAD_LIMIT = 4096 - 86 - 1 - 16
#: how much of a preview a notification shows whole (bytes): the rest of the payload stays small
PREVIEW_BYTES = 2000
#: the longest a push may wait at the push service when the request has no deadline (RFC 8030 TTL)
DEFAULT_TTL = 24 * 3600
MAX_TTL = 28 * 24 * 3600
#: seconds one push may take
HTTP_TIMEOUT = 10.0
#: a token's life when the request has no deadline
TOKEN_DAYS = 7
#: the longest an answer's body may be
MAX_ANSWER_BODY = 4096
#: a 429 or 5xx without Retry-After: the outbox's own backoff, starting here
RETRY = RetryPolicy(initial_interval=5.0, backoff_coefficient=2.0, maximum_interval=600.0)

_SUBJECT = re.compile(r"(mailto:[^@\s]+@[^@\s]+|https://[^\s/]+(/\S*)?)", re.IGNORECASE)


class Config(ChannelConfig):
    type: Literal["webpush"] = "webpush"
    vapid_private_key: SecretStr | None = None
    """The VAPID private key (the raw 32 bytes in URL-safe base64, or PEM). Unset: made once in the
    state directory (``webpush-vapid.key``). Replicas must share it: set it here from the
    environment (``${HITL_WEBPUSH_KEY}``), since every subscription is bound to its public key."""
    subject: str | None = None
    """Who the push services may contact about these pushes (RFC 8292 ``sub``): ``mailto:you@...``
    or an https URL. Unset: ``server.public_url`` when it is https, else ``mailto:hitl-mcp@localhost``."""
    show_payload: bool = True
    """Send the question or action, its risk and preview. The payload is encrypted for the person's
    browser (the push service cannot read it), but a locked phone may show it: off, the notification
    says only "A request is waiting" and offers only Open."""

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str | None) -> str | None:
        if value is not None and not _SUBJECT.fullmatch(value.strip()):
            raise ValueError("expected mailto:you@example.com or an https:// URL")
        return value.strip() if value else value

    @field_validator("vapid_private_key")
    @classmethod
    def _not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value
