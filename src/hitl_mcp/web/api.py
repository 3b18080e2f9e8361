"""The JSON API.

``GET /api/requests?status=&before=&limit=`` (newest first, keyset-paginated: pass an answer's
``next`` as ``before`` for the page after it), ``GET /api/requests/{id}``,
``POST /api/requests/{id}/reply``. Every route needs the web token (or a session; a change also its
CSRF token); a request without it changes nothing. Status codes: 401 no credentials, 404 unknown id,
409 no longer pending (the body says who answered, how and when), 422 a reply that does not fit the
request, 400 a body that is not JSON (or nested too deep to read). Errors are
``{"ok": false, "error": ...}``; the reply's answers are in ``replies.py``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp import __version__
from hitl_mcp.core.models import Status
from hitl_mcp.web import MAX_BODY, REPLY_FIELDS, WEB_RESPONDER, stepup
from hitl_mcp.web.deps import requires, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.people import inbox_reply
from hitl_mcp.web.replies import ReplyInvalid, answered, request_detail, request_json, resolve, too_late

log = logging.getLogger("hitl_mcp.web")

__all__ = [
    "MAX_BODY",
    "REPLY_FIELDS",
    "WEB_RESPONDER",
    "healthz",
    "request_detail",
    "request_json",
    "routes",
]


def refuse(status: int, message: str) -> Problem:
    return Problem(status, message, api=True)


@requires(api=True)
async def list_requests(http: HttpRequest) -> Response:
    status_arg = http.query_params.get("status")
    status = None
    if status_arg:
        try:
            status = Status(status_arg)
        except ValueError:
            raise refuse(422, f"status must be one of: {', '.join(s.value for s in Status)}") from None
    try:
        limit = int(http.query_params.get("limit", "100"))
    except ValueError:
        raise refuse(422, "limit must be a whole number") from None
    if not 1 <= limit <= 1000:
        raise refuse(422, "limit must be between 1 and 1000")
    before = http.query_params.get("before") or None
    broker = await web(http).broker()
    if before is not None and (len(before) > 64 or await broker.get(before) is None):
        raise refuse(422, "before must be the next value of a previous page (a request id)")
    page = await broker.list_requests(status, limit + 1, before)
    more = len(page) > limit
    page = page[:limit]
    return JSONResponse({"requests": [request_json(r) for r in page], "next": page[-1].id if more else None})


@requires(api=True)
async def show_request(http: HttpRequest) -> Response:
    broker = await web(http).broker()
    request = await broker.get(http.path_params["id"])
    if request is None:
        raise refuse(404, "no such request")
    return JSONResponse(await request_detail(broker, request))


@requires(api=True, csrf_header=True)
async def reply(http: HttpRequest) -> Response:
    data = _reply_body(await http.body())
    deps = web(http)
    broker = await deps.broker()
    fields: dict[str, Any] = {k: data.get(k) for k in REPLY_FIELDS}
    if data.get("step_up") is not None:  # a passkey assertion for a high-risk approval (stepup.py)
        request = await broker.get(http.path_params["id"])
        if request is None:
            raise refuse(404, "no such request")
        fields["proof"] = await stepup.proof(
            http, broker, request, str(fields.get("decision")), data["step_up"]
        )
    given = await inbox_reply(http, broker, http.path_params["id"], api=True, **fields)
    try:
        verdict = await resolve(broker, http.path_params["id"], given, not_found="no such request", api=True)
    except ReplyInvalid as exc:
        raise refuse(422, str(exc)) from None
    if not verdict.won and not verdict.counted:
        raise too_late(verdict.request, verdict.reason, api=True)
    return answered(verdict.request)


def _reply_body(body: bytes) -> dict[str, Any]:
    """The reply's JSON object, checked field by field against ``REPLY_FIELDS``."""
    if len(body) > MAX_BODY:
        raise refuse(413, f"the body is larger than {MAX_BODY} bytes")
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise refuse(400, "the body is not valid JSON") from None
    except RecursionError:
        raise refuse(400, "the body is JSON nested too deeply; a reply is one flat object") from None
    if not isinstance(data, dict):
        raise refuse(422, 'the body must be a JSON object such as {"text": "..."}')
    unknown = sorted(set(data) - {*REPLY_FIELDS, "step_up"})
    if unknown:
        raise refuse(422, f"unknown field {', '.join(unknown)}; valid fields: {', '.join(REPLY_FIELDS)}")
    if data.get("step_up") is not None and data.get("decision") != "approve":
        raise refuse(422, "step_up goes with an approval: a denial needs none")
    for name, limit in REPLY_FIELDS.items():
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise refuse(422, f"{name} must be a string")
        if value is not None and len(value) > limit:
            raise refuse(422, f"{name} is longer than {limit} characters")
    if data.get("decision") is not None and data["decision"] not in ("approve", "deny"):
        raise refuse(422, "decision must be approve or deny")
    return data


#: how long the store may take to answer a health check before the server is reported down
HEALTH_SECONDS = 2.0


async def healthz(http: HttpRequest) -> Response:
    """No auth. 503 when the store cannot answer a read within ``HEALTH_SECONDS``, so that a
    balancer or a container runtime stops sending work to a server that cannot record it."""
    try:
        with anyio.fail_after(HEALTH_SECONDS):
            broker = await web(http).broker()
            await broker.store_answers()
    except Exception as exc:  # any failure means the same thing to a balancer: not here
        log.warning("health check: the store did not answer: %s", type(exc).__name__)
        return JSONResponse(
            {"status": "unavailable", "store": "down", "version": __version__}, status_code=503
        )
    return JSONResponse({"status": "ok", "store": "ok", "version": __version__})


routes: list[BaseRoute] = [
    Route("/api/requests", list_requests, methods=["GET"]),
    Route("/api/requests/{id}", show_request, methods=["GET"]),
    Route("/api/requests/{id}/reply", reply, methods=["POST"]),
]
