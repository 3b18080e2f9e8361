"""The JSON API, and ``api_routes``: every route of the web surface (API, inbox pages, events).

``GET /api/requests?status=&before=&limit=`` (newest first, keyset-paginated: pass an answer's
``next`` as ``before`` for the page after it), ``GET /api/requests/{id}``,
``POST /api/requests/{id}/reply``; the pages (``/``, ``/requests/{id}``, ``/history``...) are in
``pages.py``, sign-in in ``signin.py`` and ``/events`` in ``events.py``. Every route but ``/healthz``
and the static shell needs the web token; a request without it changes nothing. Status codes: 401 no
credentials, 404 unknown id, 409 no longer pending (the body says who answered, how and when), 422 a
reply that does not fit the request, 400 a body that is not JSON (or nested too deep to read).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp import __version__
from hitl_mcp.broker import Broker, NotFound, ReplyInvalid
from hitl_mcp.models import Kind, Reply, Request, Status, iso
from hitl_mcp.results import to_outcome
from hitl_mcp.web import MAX_BODY, REPLY_FIELDS, WEB_RESPONDER
from hitl_mcp.web.auth import WebAuth
from hitl_mcp.web.events import event_routes
from hitl_mcp.web.pages import page_routes
from hitl_mcp.web.sessions import Sessions
from hitl_mcp.web.signin import signin_routes

__all__ = [
    "MAX_BODY",
    "REPLY_FIELDS",
    "WEB_RESPONDER",
    "api_routes",
    "error",
    "healthz",
    "request_detail",
    "request_json",
]

GetBroker = Callable[[], Awaitable[Broker]]


def error(code: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=code)


def request_json(request: Request) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": request.id,
        "kind": request.kind.value,
        "status": request.status.value,
        "text": request.text,
        "title": request.title,
        "details": request.details,
        "context": request.context,
        "choices": request.choices,
        "allow_free_text": request.allow_free_text,
        "payload": request.payload,
        "payload_sha256": request.payload_sha256,
        "risk": request.risk,
        "level": request.level,
        "default_answer": request.default_answer,
        "channels": request.channels,
        "client_name": request.client_name,
        "created_at": iso(request.created_at),
        "expires_at": iso(request.expires_at),
    }
    if request.kind != Kind.NOTIFICATION:
        data["outcome"] = to_outcome(request, 0.0).model_dump(mode="json", exclude={"waited_seconds"})
    return data


async def request_detail(store: Any, request: Request) -> dict[str, Any]:
    """``GET /api/requests/{id}`` (and ``hitl-mcp show --json``): the request, its deliveries, the
    replies it received and its audit rows (the trail)."""
    data = request_json(request)
    data["deliveries"] = [
        {
            "channel": d.channel,
            "action": d.action,
            "status": d.status,
            "attempts": d.attempts,
            "error": d.error,
            "at": iso(d.updated_at),
        }
        for d in await store.deliveries(request.id)
    ]
    data["replies"] = [
        {
            "channel": r.channel,
            "responder": r.responder,
            "text": r.text,
            "choice": r.choice,
            "decision": r.decision,
            "comment": r.comment,
            "at": iso(r.received_at),
            "won": r.won,
            "reason": r.reason,
        }
        for r in await store.replies(request.id)
    ]
    data["audit"] = [
        {"seq": a.seq, "at": iso(a.at), "event": a.event, "actor": a.actor, "data": a.data}
        for a in await store.audit(request.id)
    ]
    return data


def api_routes(
    get_broker: GetBroker, auth: WebAuth, web_channel: str, public_url: str | None = None
) -> list[BaseRoute]:
    """The JSON API, the inbox pages, sign-in, ``/events`` and the static shell."""
    sessions = Sessions(auth, get_broker, public_url)
    return (
        json_routes(get_broker, sessions, web_channel)
        + signin_routes(get_broker, sessions)
        + page_routes(get_broker, sessions, web_channel)
        + event_routes(get_broker, sessions)
    )


def json_routes(get_broker: GetBroker, sessions: Sessions, web_channel: str) -> list[BaseRoute]:
    async def list_requests(http: HttpRequest) -> Response:
        if await sessions.read(http) is None:
            return error(401, "missing or wrong web token")
        status_arg = http.query_params.get("status")
        status = None
        if status_arg:
            try:
                status = Status(status_arg)
            except ValueError:
                valid = ", ".join(s.value for s in Status)
                return error(422, f"status must be one of: {valid}")
        try:
            limit = int(http.query_params.get("limit", "100"))
        except ValueError:
            return error(422, "limit must be a whole number")
        if not 1 <= limit <= 1000:
            return error(422, "limit must be between 1 and 1000")
        before = http.query_params.get("before") or None
        broker = await get_broker()
        if before is not None and (len(before) > 64 or await broker.get(before) is None):
            return error(422, "before must be the next value of a previous page (a request id)")
        page = await broker.store.list(status, limit + 1, before)
        more = len(page) > limit
        page = page[:limit]
        return JSONResponse(
            {"requests": [request_json(r) for r in page], "next": page[-1].id if more else None}
        )

    async def show_request(http: HttpRequest) -> Response:
        if await sessions.read(http) is None:
            return error(401, "missing or wrong web token")
        broker = await get_broker()
        request = await broker.get(http.path_params["id"])
        if request is None:
            return error(404, "no such request")
        data = await request_detail(broker.store, request)
        return JSONResponse(data)

    async def reply(http: HttpRequest) -> Response:
        access = await sessions.read(http)
        if access is None or not access.csrf_ok(http.headers.get("x-csrf-token")):
            # a cookie alone changes nothing: a page on another site could have made the browser send it
            return error(401, "missing or wrong web token")
        body = await http.body()
        if len(body) > MAX_BODY:
            return error(413, f"the body is larger than {MAX_BODY} bytes")
        try:
            data = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError):
            return error(400, "the body is not valid JSON")
        except RecursionError:
            return error(400, "the body is JSON nested too deeply; a reply is one flat object")
        if not isinstance(data, dict):
            return error(422, 'the body must be a JSON object such as {"text": "..."}')
        unknown = sorted(set(data) - set(REPLY_FIELDS))
        if unknown:
            return error(422, f"unknown field {', '.join(unknown)}; valid fields: {', '.join(REPLY_FIELDS)}")
        for name, limit in REPLY_FIELDS.items():
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                return error(422, f"{name} must be a string")
            if value is not None and len(value) > limit:
                return error(422, f"{name} is longer than {limit} characters")
        if data.get("decision") is not None and data["decision"] not in ("approve", "deny"):
            return error(422, "decision must be approve or deny")
        broker = await get_broker()
        reply = Reply(channel=web_channel, responder=WEB_RESPONDER, **{k: data.get(k) for k in REPLY_FIELDS})
        try:
            verdict = await broker.resolve(http.path_params["id"], reply)
        except NotFound:
            return error(404, "no such request")
        except ReplyInvalid as exc:
            return error(422, str(exc))
        outcome = request_json(verdict.request)
        if not verdict.won:
            settled = verdict.request
            return error(
                409,
                verdict.reason,
                status=settled.status.value,
                responder=settled.responder,
                channel=settled.channel,
                at=iso(settled.closed_at),
                request=outcome,
            )
        return JSONResponse({"ok": True, "request": outcome})

    return [
        Route("/api/requests", list_requests, methods=["GET"]),
        Route("/api/requests/{id}", show_request, methods=["GET"]),
        Route("/api/requests/{id}/reply", reply, methods=["POST"]),
    ]


async def healthz(_: HttpRequest) -> Response:
    return JSONResponse({"status": "ok", "version": __version__})
