"""A local Pushover API (https://pushover.net/api, /api/receipts): ``POST /1/messages.json`` (form
fields; the token and user keys checked; an emergency message needs ``retry`` >= 30 and ``expire``
<= 10800 and gets a receipt), ``GET /1/receipts/<r>.json``, ``POST /1/receipts/<r>/cancel.json``,
and ``POST /1/users/validate.json``; answers and errors in Pushover's shape (``status``, ``request``,
``errors``).

It also plays the phone: :meth:`acknowledge` is the person pressing "Acknowledge", which stops the
repeats, marks the receipt, and (when the message named one) calls the ``callback`` URL back with the
receipt's fields, as Pushover does. Every call fires ``changes``.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.events import Changes


def key() -> str:
    return secrets.token_hex(15)


@dataclass
class PushoverStandin:
    token: str = field(default_factory=key)
    user: str = field(default_factory=key)
    messages: list[dict[str, Any]] = field(default_factory=list)
    receipts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    polls: list[str] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    #: statuses to answer the next messages with instead (429, 500)
    fail: list[int] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/1/messages.json", self._message, methods=["POST"]),
                Route("/1/users/validate.json", self._validate, methods=["POST"]),
                Route("/1/receipts/{r}.json", self._receipt, methods=["GET"]),
                Route("/1/receipts/{r}/cancel.json", self._cancel, methods=["POST"]),
            ]
        )

    async def acknowledge(self, receipt: str, device: str = "pixel") -> httpx2.Response | None:
        """The person acknowledges the page; Pushover's callback, when the message asked for one."""
        r = self.receipts[receipt]
        r.update(acknowledged=1, acknowledged_at=int(time.time()), acknowledged_by=self.user)
        r["acknowledged_by_device"] = device
        self.changes.fire()
        callback = r.get("callback")
        if not callback:
            return None
        fields = {k: str(r[k]) for k in ("acknowledged", "acknowledged_at", "acknowledged_by")}
        fields.update(receipt=receipt, acknowledged_by_device=device)
        async with httpx2.AsyncClient() as client:
            return await client.post(callback, data=fields)

    def _ok(self, **more: Any) -> JSONResponse:
        self.changes.fire()
        return JSONResponse({"status": 1, "request": secrets.token_hex(8), **more})

    def _error(self, status: int, *errors: str, **more: Any) -> JSONResponse:
        self.changes.fire()
        body = {"status": 0, "request": secrets.token_hex(8), "errors": list(errors), **more}
        return JSONResponse(body, status_code=status)

    async def _message(self, http: Request) -> Response:
        form = dict(await http.form())
        if self.fail:
            status = self.fail.pop(0)
            return self._error(status, "as the test asked")
        if form.get("token") != self.token:
            return self._error(400, "application token is invalid", token="invalid")
        if form.get("user") != self.user:
            return self._error(
                400, "user identifier is not a valid user, group, or subscribed user key", user="invalid"
            )
        if not form.get("message"):
            return self._error(400, "message cannot be blank", message="cannot be blank")
        self.messages.append(form)
        if form.get("priority") == "2":
            retry, expire = int(str(form.get("retry") or 0)), int(str(form.get("expire") or 0))
            if retry < 30:
                return self._error(400, "retry is invalid: must be at least 30 seconds")
            if not 0 < expire <= 10800:
                return self._error(400, "expire is invalid: must be at most 10800 seconds")
            receipt = key()
            self.receipts[receipt] = {
                "acknowledged": 0,
                "acknowledged_at": 0,
                "acknowledged_by": "",
                "acknowledged_by_device": "",
                "last_delivered_at": int(time.time()),
                "expired": 0,
                "expires_at": int(time.time()) + expire,
                "called_back": 0,
                "called_back_at": 0,
                "callback": form.get("callback"),
                "tags": form.get("tags"),
            }
            return self._ok(receipt=receipt)
        return self._ok()

    async def _validate(self, http: Request) -> Response:
        form = dict(await http.form())
        if form.get("token") != self.token:
            return self._error(400, "application token is invalid")
        if form.get("user") != self.user:
            return self._error(400, "user key is invalid")
        return self._ok(devices=["pixel"], licenses=["Android"])

    async def _receipt(self, http: Request) -> Response:
        r = http.path_params["r"]
        if http.query_params.get("token") != self.token:
            return self._error(400, "application token is invalid")
        self.polls.append(r)
        found = self.receipts.get(r)
        if found is None:
            return self._error(404, "receipt not found; may be invalid or expired")
        return self._ok(**{k: v for k, v in found.items() if k not in ("callback", "tags")})

    async def _cancel(self, http: Request) -> Response:
        r = http.path_params["r"]
        form = dict(await http.form())
        if form.get("token") != self.token:
            return self._error(400, "application token is invalid")
        if r not in self.receipts:
            return self._error(404, "receipt not found; may be invalid or expired")
        self.cancelled.append(r)
        return self._ok()
