"""A local push service (RFC 8030's push resource), and the browser's half of each subscription.

:meth:`PushStandin.subscribe` plays ``pushManager.subscribe``: it makes the browser's key pair
(P-256) and auth secret, remembers the application server key the subscription is bound to, and
returns the subscription as ``PushSubscription.toJSON()`` gives it, with an endpoint here.

``POST /push/<id>`` checks what a push service checks, and what the browser would: the VAPID
``Authorization`` (RFC 8292: ``vapid t=<JWT>,k=<key>``; the ES256 signature, ``aud`` is this
origin, ``exp`` in the future and within 24 hours, a ``sub``, and ``k`` is the key the subscription
was made with), a ``TTL``, ``Content-Encoding: aes128gcm``, a body of at most 4,096 bytes; then it
decrypts the body with the subscription's private key and auth secret (RFC 8291, ``http_ece``). So
what a test reads in :attr:`PushStandin.received` is exactly what the person's browser would get.
``answer`` queues statuses to answer instead (410, 429, 503) for one subscription. Each push fires
``changes``.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.events import Changes


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """One browser's subscription: its keys, and the server key it was made for."""

    id: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes
    server_key: str
    endpoint: str

    def as_json(self) -> dict[str, Any]:
        public = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {
            "endpoint": self.endpoint,
            "expirationTime": None,
            "keys": {"p256dh": b64url(public), "auth": b64url(self.auth)},
        }


@dataclass
class Received:
    subscription: str
    headers: dict[str, str]
    data: dict[str, Any]
    size: int
    at: float


@dataclass
class PushStandin:
    base: str = ""
    browsers: dict[str, Browser] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    refused: list[tuple[str, int, str]] = field(default_factory=list)
    answers: dict[str, list[int]] = field(default_factory=dict)
    changes: Changes = field(default_factory=Changes)
    #: called with each push taken, as soon as it is decrypted (the benches time it)
    on_receive: Callable[[Received], None] | None = None

    def subscribe(self, server_key: str) -> dict[str, Any]:
        sid = secrets.token_urlsafe(12)
        browser = Browser(
            sid,
            ec.generate_private_key(ec.SECP256R1()),
            os.urandom(16),
            server_key,
            f"{self.base}/push/{sid}",
        )
        self.browsers[sid] = browser
        return browser.as_json()

    def answer(self, subscription: dict[str, Any], *statuses: int) -> None:
        self.answers.setdefault(subscription["endpoint"].rsplit("/", 1)[1], []).extend(statuses)

    def to(self, subscription: dict[str, Any]) -> list[dict[str, Any]]:
        """What one browser received, oldest first."""
        sid = subscription["endpoint"].rsplit("/", 1)[1]
        return [r.data for r in self.received if r.subscription == sid]

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/push/{sid}", self._push, methods=["POST"])])

    async def _push(self, http: Request) -> Response:
        sid = http.path_params["sid"]
        browser = self.browsers.get(sid)
        body = await http.body()
        try:
            if browser is None:
                return self._refuse(sid, 404, "no such subscription")
            problem = self._check(http, browser, body)
            if problem is not None:
                return self._refuse(sid, problem[0], problem[1])
            queued = self.answers.get(sid)
            if queued:
                status = queued.pop(0)
                headers = {"Retry-After": "0"} if status == 429 else {}
                if status == 410:
                    self.browsers.pop(sid, None)
                return self._refuse(sid, status, "as the test asked", headers)
            plain = http_ece.decrypt(
                body, private_key=browser.private_key, auth_secret=browser.auth, version="aes128gcm"
            )
            taken = Received(sid, dict(http.headers), json.loads(plain), len(body), time.time())
            self.received.append(taken)
            if self.on_receive is not None:
                self.on_receive(taken)
            return Response(status_code=201, headers={"Location": f"{self.base}/message/{sid}"})
        finally:
            self.changes.fire()

    def _refuse(self, sid: str, status: int, why: str, headers: dict[str, str] | None = None) -> Response:
        self.refused.append((sid, status, why))
        return JSONResponse({"code": status, "message": why}, status_code=status, headers=headers)

    def _check(self, http: Request, browser: Browser, body: bytes) -> tuple[int, str] | None:
        if http.headers.get("content-encoding") != "aes128gcm":
            return 400, "Content-Encoding must be aes128gcm"
        if not (http.headers.get("ttl") or "").isdigit():
            return 400, "TTL missing"
        if len(body) > 4096:
            return 413, "payload too large"
        auth = http.headers.get("authorization") or ""
        scheme, _, rest = auth.partition(" ")
        if scheme.lower() != "vapid":
            return 401, "no VAPID authorization"
        parts = dict(p.split("=", 1) for p in rest.split(",") if "=" in p)
        token, key = parts.get("t", ""), parts.get("k", "")
        if key != browser.server_key:
            return 403, "the VAPID key is not the one the subscription was made with"
        try:
            head, claims_part, signature = token.split(".")
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(key))
            raw = unb64url(signature)
            der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
            public.verify(der, f"{head}.{claims_part}".encode(), ec.ECDSA(hashes.SHA256()))
            claims = json.loads(unb64url(claims_part))
        except (ValueError, InvalidSignature):
            return 403, "the VAPID JWT does not verify"
        if json.loads(unb64url(head)).get("alg") != "ES256":
            return 403, "the VAPID JWT is not ES256"
        if claims.get("aud") != self.base:
            return 403, f"the VAPID JWT's aud is not {self.base}"
        if not time.time() < float(claims.get("exp", 0)) <= time.time() + 86400:
            return 403, "the VAPID JWT's exp is not within 24 hours"
        if not claims.get("sub"):
            return 403, "the VAPID JWT has no sub"
        return None
