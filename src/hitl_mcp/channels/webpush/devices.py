"""Web Push: the devices a push goes to. Light (no pywebpush): the inbox and the CLI read it too.

A device is one browser's push subscription (``PushSubscription.toJSON()``: the push service's
endpoint and the browser's keys ``p256dh`` and ``auth``), kept as a stored credential of kind
``webpush`` named ``<holder>/<id>``: the holder is the person signed in when it was turned on, or
``operator``; the id is the first 16 hex digits of the endpoint's SHA-256 (the credential's digest is
all of it). The credential (and so its audit row) holds only whose it is, its label and the push
service's host; the endpoint and the keys, which let anyone holding them write to the browser, are
kept apart, in the ``webpush`` state namespace under ``device:<id>``. Removing a device (the inbox,
``hitl-mcp people devices --remove``, or the push service's 404/410) revokes it: nothing is sent to
it any more, and its buttons stop counting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from hitl_mcp.kit.signing import unb64url

__all__ = [
    "DEVICE",
    "OPERATOR_HOLDER",
    "Device",
    "DeviceError",
    "endpoint_digest",
    "parse_subscription",
    "state_key",
]

DEVICE = "webpush"
"""The kind of stored credential a Web Push device is."""
OPERATOR_HOLDER = "operator"
#: the longest endpoint taken (browsers' are about 200 to 500 characters)
MAX_ENDPOINT = 2048


class DeviceError(ValueError):
    """A subscription that cannot be used; the message is safe to show."""


@dataclass(frozen=True)
class Device:
    """One browser's subscription, whose it is (``person`` None: the operator's) and its label."""

    name: str
    person: str | None
    endpoint: str
    p256dh: str
    auth: str
    label: str = ""
    created_at: float = 0.0

    @property
    def id(self) -> str:
        return self.name.rpartition("/")[2]

    @property
    def holder(self) -> str:
        return self.person or OPERATOR_HOLDER

    @property
    def service(self) -> str:
        """The push service's host (what lists show: never the whole endpoint)."""
        return urlsplit(self.endpoint).hostname or "?"

    def subscription(self) -> dict[str, Any]:
        """As pywebpush takes it."""
        return {"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}}

    @property
    def key(self) -> str:
        """Where its subscription is kept (the ``webpush`` state namespace)."""
        return state_key(self.id)

    def data(self) -> dict[str, Any]:
        """What the credential row (and its audit row) keeps: nothing that lets anyone push."""
        return {"person": self.person, "label": self.label, "service": self.service}

    def secret(self) -> str:
        """The subscription, kept apart from the credential."""
        return json.dumps({"endpoint": self.endpoint, "p256dh": self.p256dh, "auth": self.auth})

    @classmethod
    def of(cls, name: str, data: Mapping[str, Any], created_at: float, secret: str) -> Device:
        sub = json.loads(secret)
        return cls(
            name,
            data.get("person") or None,
            str(sub["endpoint"]),
            str(sub["p256dh"]),
            str(sub["auth"]),
            str(data.get("label") or ""),
            created_at,
        )

    def listed(self) -> dict[str, Any]:
        """What the inbox and the CLI show: never the endpoint or the keys."""
        return {
            "id": self.id,
            "holder": self.holder,
            "label": self.label,
            "service": self.service,
            "created_at": self.created_at,
        }


def state_key(device_id: str) -> str:
    return f"device:{device_id}"


def endpoint_digest(endpoint: str) -> str:
    return hashlib.sha256(endpoint.encode()).hexdigest()


def parse_subscription(data: Any, person: str | None, label: str = "") -> Device:
    """A device from a browser's ``PushSubscription.toJSON()``; ``DeviceError`` saying what is wrong."""
    if not isinstance(data, Mapping):
        raise DeviceError("Expected the browser's push subscription (an object with endpoint and keys).")
    endpoint, keys = data.get("endpoint"), data.get("keys")
    if not isinstance(endpoint, str) or not endpoint or len(endpoint) > MAX_ENDPOINT:
        raise DeviceError("The subscription has no usable endpoint.")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise DeviceError("The subscription's endpoint is not an http(s) URL.")
    if not isinstance(keys, Mapping):
        raise DeviceError("The subscription has no keys.")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    try:
        point = unb64url(p256dh) if isinstance(p256dh, str) else b""
        secret = unb64url(auth) if isinstance(auth, str) else b""
    except ValueError:
        point = secret = b""
    if len(point) != 65 or point[0] != 4:
        raise DeviceError("The subscription's p256dh key is not a P-256 public key.")
    if len(secret) != 16:
        raise DeviceError("The subscription's auth secret is not 16 bytes.")
    holder = person or OPERATOR_HOLDER
    name = f"{holder}/{endpoint_digest(endpoint)[:16]}"
    assert isinstance(p256dh, str) and isinstance(auth, str)
    return Device(name, person, endpoint, p256dh, auth, label[:60])
