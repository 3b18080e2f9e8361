"""The inbox as server-rendered pages: pending requests, one request, history, notifications, login.

GET routes only read. Every change is a POST with the CSRF token (a ``csrf`` form field or the
``X-CSRF-Token`` header) on top of the session cookie, or the bearer token. The forms work without
JavaScript (a POST, then a redirect); ``static/app.js`` submits them in place and asks for JSON.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, PackageLoader
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from hitl_mcp import __version__
from hitl_mcp.broker import Broker, NotFound, ReplyInvalid
from hitl_mcp.models import Kind, Reply, Request, Status, canonical_json, iso, now
from hitl_mcp.web import MAX_BODY, REPLY_FIELDS, WEB_RESPONDER
from hitl_mcp.web.sessions import Access, Sessions
from hitl_mcp.web.views import (
    HISTORY_KINDS,
    HISTORY_STATUSES,
    HistoryFilter,
    agent_groups,
    agent_name,
    ago,
    already_line,
    clock,
    expires_soon,
    outcome_line,
    pretty_json,
    session_label,
    time_left,
    visible_payload,
)

GetBroker = Callable[[], Awaitable[Broker]]

STATIC_DIR = Path(__file__).parent / "static"
#: pending requests on one page of the inbox; the rest are a link away ("n more")
PENDING_PAGE = 200
NOTIFICATION_SCAN = 100
NOTIFICATION_LIMIT = 30
HISTORY_SCAN = 2000
HISTORY_LIMIT = 200
DISMISSED = "dismissed"

PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; manifest-src 'self'; worker-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


@cache
def asset_version(name: str) -> str:
    """A content hash for cache busting: ``/static/app.css?v=<hash>``."""
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:10]


def static_url(name: str) -> str:
    return f"/static/{name}?v={asset_version(name)}"


SHELL = ("app.css", "app.js", "icon.svg", "icon-192.png", "icon-512.png", "offline.html")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("hitl_mcp.web", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        version=__version__,
        static=static_url,
        iso=iso,
        clock=clock,
        ago=ago,
        time_left=time_left,
        expires_soon=expires_soon,
        pretty_json=pretty_json,
        visible_payload=visible_payload,
        compact_json=canonical_json,
        outcome_line=outcome_line,
        agent_name=agent_name,
        session_label=session_label,
        Kind=Kind,
        Status=Status,
    )
    return env


ENV = _environment()


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = ENV.get_template(name).render(**context)
    return HTMLResponse(html, status, headers=PAGE_HEADERS)


def wants_json(http: HttpRequest) -> bool:
    return "application/json" in http.headers.get("accept", "")


def safe_next(value: str | None) -> str:
    """Only a local path: never another site (``//host``) or a scheme."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


async def read_form(http: HttpRequest) -> tuple[dict[str, str] | None, tuple[int, str] | None]:
    """The urlencoded body, read up to ``MAX_BODY`` bytes; or the status and message refusing it."""
    body = b""
    async for chunk in http.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None, (413, f"The form is larger than {MAX_BODY} bytes.")
    ctype = http.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and ctype != "application/x-www-form-urlencoded":
        return None, (415, "Send the form as application/x-www-form-urlencoded.")
    try:  # strict: bytes that are not UTF-8, raw or %-encoded, are refused rather than replaced
        pairs = parse_qsl(
            body.decode(), keep_blank_values=True, max_num_fields=20, encoding="utf-8", errors="strict"
        )
    except UnicodeDecodeError:
        return None, (400, "The form is not valid UTF-8 text.")
    except ValueError:
        return None, (400, "The form could not be read.")
    return dict(pairs), None


def csrf_ok(http: HttpRequest, access: Access, form: Mapping[str, str]) -> bool:
    """A bearer token is never sent by a browser on its own; a cookie is, so it needs the CSRF token."""
    return access.csrf_ok(http.headers.get("x-csrf-token") or form.get("csrf"))


def signed_out(http: HttpRequest, then: str | None = None) -> Response:
    if wants_json(http):
        return JSONResponse({"ok": False, "error": "Sign in first."}, status_code=401)
    return render("signin.html", 401, page="signin", signed_in=False, now=now(), pending_count=0, then=then)


async def notification_feed(broker: Broker) -> list[Request]:
    """The newest notifications nobody has dismissed (a dismissal is an audit row, not a column)."""
    feed: list[Request] = []
    for note in await broker.store.list(Status.NOTIFIED, NOTIFICATION_SCAN):
        if any(row.event == DISMISSED for row in await broker.store.audit(note.id)):
            continue
        feed.append(note)
        if len(feed) >= NOTIFICATION_LIMIT:
            break
    return feed


def success_message(request: Request) -> str:
    if request.kind == Kind.APPROVAL:
        verb = "Approved" if request.approved else "Denied"
        return f"{verb}: {request.text}" + (f" ({request.comment})" if request.comment else "")
    return f"Answered “{request.answer}”: {request.text}"


def page_routes(get_broker: GetBroker, sessions: Sessions, web_channel: str) -> list[BaseRoute]:
    def base_context(http: HttpRequest, pending: int, page: str) -> dict[str, Any]:
        access: Access | None = getattr(http.state, "access", None)
        return {
            "csrf": access.csrf if access else "",
            "pending_count": pending,
            "page": page,
            "now": now(),
            "signed_in": True,
        }

    async def pending_count(broker: Broker) -> int:
        return await broker.store.count(Status.PENDING)

    async def problem(
        http: HttpRequest, status: int, title: str, message: str, request_id: str | None = None
    ) -> Response:
        if wants_json(http):
            return JSONResponse({"ok": False, "error": message}, status_code=status)
        broker = await get_broker()
        return render(
            "message.html",
            status,
            title=title,
            message=message,
            request_id=request_id,
            **base_context(http, await pending_count(broker), "message"),
        )

    async def inbox(http: HttpRequest) -> Response:
        if await sessions.read(http) is None:
            return signed_out(http)
        broker = await get_broker()
        before = http.query_params.get("before") or None
        if before is not None and (len(before) > 64 or await broker.get(before) is None):
            return await problem(
                http, 404, "Not found", "There is no such page of the inbox: its link names no request."
            )
        # newest first, a page at a time; "before" is the last request of the page before
        pending = await broker.store.list(Status.PENDING, PENDING_PAGE + 1, before)
        more = len(pending) > PENDING_PAGE
        pending = pending[:PENDING_PAGE]
        answered = None
        answered_id = http.query_params.get("answered")
        if answered_id:
            answered = await broker.get(answered_id[:64])
        return render(
            "inbox.html",
            groups=agent_groups(pending),
            next_page=pending[-1].id if more else None,
            more=await broker.store.count(Status.PENDING, pending[-1].id) if more else 0,
            paged=before is not None,
            notifications=await notification_feed(broker),
            answered=answered,
            **base_context(http, await pending_count(broker), "inbox"),
        )

    async def request_page(
        http: HttpRequest,
        status: int = 200,
        error: str | None = None,
        draft: Mapping[str, str] | None = None,
    ) -> Response:
        if await sessions.read(http) is None:
            return signed_out(http)
        broker = await get_broker()
        request = await broker.get(http.path_params["id"])
        if request is None:
            return await problem(http, 404, "Not found", "There is no request with that id.")
        return render(
            "request.html",
            status,
            request=request,
            deliveries=await broker.store.deliveries(request.id),
            replies=await broker.store.replies(request.id),
            audit=await broker.store.audit(request.id),
            error=error,
            draft=draft or {},
            **base_context(http, await pending_count(broker), "request"),
        )

    async def show(http: HttpRequest) -> Response:
        return await request_page(http)

    async def answer(http: HttpRequest) -> Response:
        access = await sessions.read(http)
        if access is None:
            return signed_out(http)
        request_id = http.path_params["id"]
        form, refused = await read_form(http)
        if refused is not None or form is None:
            status, message = refused or (400, "The form could not be read.")
            return await problem(http, status, "Not sent", message, request_id)
        if not csrf_ok(http, access, form):
            return await problem(
                http,
                403,
                "Not sent",
                "This form did not come from your inbox, or it is out of date. Reload and try again.",
                request_id,
            )
        fields: dict[str, str | None] = {}
        for name, limit in REPLY_FIELDS.items():
            value = form.get(name, "")
            if len(value) > limit:
                return await problem(
                    http, 422, "Not sent", f"The {name} is longer than {limit} characters.", request_id
                )
            fields[name] = value if value.strip() else None
        decision = fields["decision"]
        if decision is not None and decision not in ("approve", "deny"):
            return await problem(http, 422, "Not sent", "The decision must be approve or deny.", request_id)
        broker = await get_broker()
        if decision == "approve" and form.get("confirm") != "yes":
            # a high-risk approval is given in two steps, with or without JavaScript
            request = await broker.get(request_id)
            if request is not None and request.is_open and request.risk == "high":
                message = "Approving a high-risk request needs a confirmation."
                if wants_json(http):
                    return JSONResponse({"ok": False, "error": message, "confirm": True}, status_code=428)
                return render(
                    "confirm.html",
                    request=request,
                    comment=form.get("comment", ""),
                    back=f"/requests/{request.id}" if form.get("next") == "request" else "/",
                    next=form.get("next", ""),
                    **base_context(http, await pending_count(broker), "confirm"),
                )
        # the button pressed says what the answer is: a decision, else a choice, else the text
        what = "decision" if decision is not None else "choice" if fields["choice"] is not None else "text"
        reply = Reply(
            channel=web_channel, responder=WEB_RESPONDER, comment=fields["comment"], **{what: fields[what]}
        )
        try:
            verdict = await broker.resolve(request_id, reply)
        except NotFound:
            return await problem(http, 404, "Not found", "There is no request with that id.")
        except ReplyInvalid as exc:
            message = str(exc)[:1].upper() + str(exc)[1:]
            if wants_json(http):
                return JSONResponse({"ok": False, "error": message}, status_code=422)
            return await request_page(http, 422, message, form)
        settled = verdict.request
        if not verdict.won:
            line = already_line(settled)
            if wants_json(http):
                return JSONResponse(
                    {
                        "ok": False,
                        "error": line,
                        "status": settled.status.value,
                        "responder": settled.responder,
                        "channel": settled.channel,
                        "at": iso(settled.closed_at),
                    },
                    status_code=409,
                )
            return render(
                "already.html",
                409,
                request=settled,
                line=line,
                **base_context(http, await pending_count(broker), "message"),
            )
        if wants_json(http):
            return JSONResponse(
                {"ok": True, "message": success_message(settled), "status": settled.status.value}
            )
        target = "/?answered=" + settled.id if form.get("next") == "inbox" else f"/requests/{settled.id}"
        return RedirectResponse(target, status_code=303)

    async def dismiss(http: HttpRequest) -> Response:
        access = await sessions.read(http)
        if access is None:
            return signed_out(http)
        form, refused = await read_form(http)
        if refused is not None or form is None:
            status, message = refused or (400, "The form could not be read.")
            return await problem(http, status, "Not dismissed", message)
        if not csrf_ok(http, access, form):
            return await problem(
                http, 403, "Not dismissed", "This form did not come from your inbox. Reload and try again."
            )
        broker = await get_broker()
        request_id = http.path_params.get("id")
        if request_id is None:
            targets = [n.id for n in await notification_feed(broker)]
        else:
            note = await broker.get(request_id)
            if note is None or note.kind != Kind.NOTIFICATION:
                return await problem(http, 404, "Not found", "There is no notification with that id.")
            dismissed = any(row.event == DISMISSED for row in await broker.store.audit(note.id))
            targets = [] if dismissed else [note.id]
        for target in targets:
            await broker.record(target, DISMISSED, WEB_RESPONDER, {"channel": web_channel})
        if wants_json(http):
            return JSONResponse({"ok": True, "dismissed": targets})
        return RedirectResponse("/", status_code=303)

    async def history(http: HttpRequest) -> Response:
        if await sessions.read(http) is None:
            return signed_out(http)
        broker = await get_broker()
        wanted = HistoryFilter.from_query(http.query_params)
        scanned = await broker.store.list(None, HISTORY_SCAN)
        settled = [r for r in scanned if r.status in HISTORY_STATUSES and r.kind in HISTORY_KINDS]
        rows = sorted(
            (r for r in settled if wanted.matches(r)),
            key=lambda r: r.closed_at or r.created_at,
            reverse=True,
        )
        pending = await pending_count(broker)
        return render(
            "history.html",
            rows=rows[:HISTORY_LIMIT],
            total=len(rows),
            limit=HISTORY_LIMIT,
            filters=wanted,
            agents=sorted({agent_name(r) for r in settled} | ({wanted.agent} if wanted.agent else set())),
            kinds=[k.value for k in HISTORY_KINDS],
            statuses=[s.value for s in HISTORY_STATUSES],
            **base_context(http, pending, "history"),
        )

    async def manifest(_: HttpRequest) -> Response:
        return JSONResponse(
            {
                "name": "hitl-mcp inbox",
                "short_name": "hitl inbox",
                "description": "Answer your AI agents' questions and approvals.",
                "id": "/",
                "start_url": "/",
                "scope": "/",
                "display": "standalone",
                "background_color": "#f5f6f8",
                "theme_color": "#4338ca",
                "icons": [
                    {"src": static_url("icon-192.png"), "sizes": "192x192", "type": "image/png"},
                    {"src": static_url("icon-512.png"), "sizes": "512x512", "type": "image/png"},
                    {
                        "src": static_url("icon-512.png"),
                        "sizes": "512x512",
                        "type": "image/png",
                        "purpose": "maskable",
                    },
                    {"src": static_url("icon.svg"), "sizes": "any", "type": "image/svg+xml"},
                ],
            },
            media_type="application/manifest+json",
        )

    async def service_worker(_: HttpRequest) -> Response:
        shell = [static_url(name) for name in SHELL]
        body = ENV.get_template("sw.js").render(shell=shell, cache_name="hitl-shell-" + _shell_hash(shell))
        return Response(
            body,
            media_type="text/javascript",
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )

    return [
        Route("/", inbox, methods=["GET"]),
        Route("/requests/{id}", show, methods=["GET"]),
        Route("/requests/{id}/answer", answer, methods=["POST"]),
        Route("/history", history, methods=["GET"]),
        Route("/notifications/dismiss", dismiss, methods=["POST"]),
        Route("/notifications/{id}/dismiss", dismiss, methods=["POST"]),
        Route("/manifest.webmanifest", manifest, methods=["GET"]),
        Route("/sw.js", service_worker, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]


def _shell_hash(urls: list[str]) -> str:
    return hashlib.sha256("\n".join(urls).encode()).hexdigest()[:10]
