"""Web Push: one push to one device. RFC 8291's encryption (pywebpush, with http_ece), RFC 8292's
VAPID JWT (py-vapid), RFC 8030's POST (httpx2). The VAPID key pair is made once in the state
directory, or given in the config (replicas share it)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid
from pywebpush import WebPusher

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.webpush.devices import Device
from hitl_mcp.core.retry import retry_after
from hitl_mcp.kit.signing import SecretFile, b64url

__all__ = ["Gone", "Keys", "send"]

#: a VAPID JWT lives 12 hours (RFC 8292 §2: at most 24); one is made per push service and reused
JWT_SECONDS = 12 * 3600
KEY_FILE = "webpush-vapid.key"


class Gone(Exception):
    """The push service no longer knows this subscription (404 or 410): forget the device."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def _fresh() -> bytes:
    vapid = Vapid()
    vapid.generate_keys()
    number: int = vapid.private_key.private_numbers().private_value
    return number.to_bytes(32, "big")


def _usable(text: str) -> bool:
    return len(text) == 43


@dataclass
class Keys:
    """The VAPID key pair and the JWTs signed with it, one per push service (its origin)."""

    vapid: Any
    subject: str
    _jwts: dict[str, tuple[float, str]] = field(default_factory=dict)

    @classmethod
    def load(cls, configured: str | None, state_dir: Path | None, subject: str) -> Keys:
        if configured:
            text = configured.strip()
            vapid = Vapid.from_pem(text.encode()) if "BEGIN" in text else Vapid.from_string(text)
        else:
            assert state_dir is not None
            secret = SecretFile(
                state_dir, KEY_FILE, make=lambda: b64url(_fresh()), usable=_usable, holds="the VAPID key"
            ).get()
            vapid = Vapid.from_string(secret)
        return cls(vapid, subject)

    @property
    def public_key(self) -> str:
        """The application server key the browser subscribes with (uncompressed P-256, base64url)."""
        raw = self.vapid.public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return b64url(raw)

    def authorization(self, endpoint: str, at: float) -> str:
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        found = self._jwts.get(audience)
        if found is None or found[0] - at < 3600:
            expires = int(at) + JWT_SECONDS
            signed = self.vapid.sign({"aud": audience, "exp": expires, "sub": self.subject})
            found = (float(expires), str(signed["Authorization"]))
            self._jwts[audience] = found
        return found[1]


def topic(request_id: str) -> str:
    """RFC 8030 §5.4: a later push with the same topic replaces one the device has not fetched yet."""
    return b64url(hashlib.sha256(request_id.encode()).digest())[:32]


async def send(
    client: httpx2.AsyncClient,
    keys: Keys,
    device: Device,
    payload: bytes,
    *,
    ttl: int,
    urgency: str,
    request_id: str,
) -> None:
    """Encrypt ``payload`` for the device and post it; ``Gone`` for 404/410, ``DeliveryError`` for
    the rest (429 and 5xx with the push service's Retry-After, for the outbox to retry)."""
    body = WebPusher(device.subscription()).encode(payload, "aes128gcm")["body"]
    headers = {
        "TTL": str(ttl),
        "Urgency": urgency,
        "Topic": topic(request_id),
        "Content-Encoding": "aes128gcm",
        "Content-Type": "application/octet-stream",
        "Authorization": keys.authorization(device.endpoint, time.time()),
    }
    try:
        response = await client.post(device.endpoint, content=body, headers=headers)
    except httpx2.HTTPError as exc:
        raise DeliveryError(f"webpush: cannot reach {device.service}: {type(exc).__name__}") from None
    status = response.status_code
    if status in (200, 201, 202):
        return
    if status in (404, 410):
        raise Gone(status)
    if status == 429 or status >= 500:
        raise DeliveryError(
            f"webpush: {device.service} answered HTTP {status}", retry_after=retry_after(response.headers)
        )
    raise DeliveryError(f"webpush: {device.service} refused the push (HTTP {status})", permanent=True)
