"""The inbox as server-rendered pages: pending requests, one request, history, notifications, login.

GET routes only read. Every change is a POST with the CSRF token (a ``csrf`` form field or the
``X-CSRF-Token`` header) on top of the session cookie, or the bearer token. The forms work without
JavaScript (a POST, then a redirect); ``static/app.js`` submits them in place and asks for JSON.
"""

from __future__ import annotations

import hashlib
import hmac
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
from hitl_mcp.web.auth import COOKIE, WebAuth
from hitl_mcp.web.links import GRANT_COOKIE, LINK_PATH, SPENT, Grant, RequestLinks
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
)

GetBroker = Callable[[], Awaitable[Broker]]

STATIC_DIR = Path(__file__).parent / "static"
PENDING_LIMIT = 500
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
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=20, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        return None, (400, "The form could not be read.")
    return dict(pairs), None


def csrf_ok(http: HttpRequest, auth: WebAuth, form: Mapping[str, str]) -> bool:
    """A bearer token is never sent by a browser on its own; a cookie is, so it needs the CSRF token."""
    return auth.bearer_ok(http) or csrf_matches(http, form, auth.csrf_token)


def csrf_matches(http: HttpRequest, form: Mapping[str, str], expected: str) -> bool:
    sent = http.headers.get("x-csrf-token") or form.get("csrf") or ""
    return hmac.compare_digest(sent.encode(), expected.encode())


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


def page_routes(get_broker: GetBroker, auth: WebAuth, web_channel: str) -> list[BaseRoute]:
    links = RequestLinks(auth)

    def base_context(pending: int, page: str, grant: Grant | None = None) -> dict[str, Any]:
        """A grant (one request, opened through a link) sees that request only: no nav, its own CSRF."""
        return {
            "csrf": auth.csrf_token if grant is None else links.csrf_for(grant),
            "pending_count": pending if grant is None else 0,
            "page": page,
            "now": now(),
            "signed_in": grant is None,
        }

    def grant_of(http: HttpRequest, request_id: str) -> Grant | bool | None:
        """True for the inbox's own session or token; a grant for this request; else None."""
        if auth.can_read(http):
            return True
        return links.grant_for(http, request_id)

    async def pending_count(broker: Broker) -> int:
        return len(await broker.store.list(Status.PENDING, PENDING_LIMIT))

    def signed_out(http: HttpRequest) -> Response:
        if wants_json(http):
            return JSONResponse({"ok": False, "error": "Sign in first."}, status_code=401)
        return render("signin.html", 401, page="signin", signed_in=False, now=now(), pending_count=0)

    async def problem(
        http: HttpRequest,
        status: int,
        title: str,
        message: str,
        request_id: str | None = None,
        grant: Grant | None = None,
    ) -> Response:
        if wants_json(http):
            return JSONResponse({"ok": False, "error": message}, status_code=status)
        pending = 0 if grant is not None else await pending_count(await get_broker())
        return render(
            "message.html",
            status,
            title=title,
            message=message,
            request_id=request_id,
            **base_context(pending, "message", grant),
        )

    async def inbox(http: HttpRequest) -> Response:
        if not auth.can_read(http):
            return signed_out(http)
        broker = await get_broker()
        pending = await broker.store.list(Status.PENDING, PENDING_LIMIT)
        answered = None
        answered_id = http.query_params.get("answered")
        if answered_id:
            answered = await broker.get(answered_id[:64])
        return render(
            "inbox.html",
            groups=agent_groups(pending),
            notifications=await notification_feed(broker),
            answered=answered,
            **base_context(len(pending), "inbox"),
        )

    async def request_page(
        http: HttpRequest,
        status: int = 200,
        error: str | None = None,
        draft: Mapping[str, str] | None = None,
    ) -> Response:
        access = grant_of(http, http.path_params["id"])
        if access is None:
            return signed_out(http)
        grant = access if isinstance(access, Grant) else None
        broker = await get_broker()
        request = await broker.get(http.path_params["id"])
        if request is None:
            return await problem(http, 404, "Not found", "There is no request with that id.", grant=grant)
        return render(
            "request.html",
            status,
            request=request,
            deliveries=await broker.store.deliveries(request.id),
            replies=await broker.store.replies(request.id),
            audit=await broker.store.audit(request.id),
            error=error,
            draft=draft or {},
            **base_context(0 if grant else await pending_count(broker), "request", grant),
        )

    async def show(http: HttpRequest) -> Response:
        return await request_page(http)

    async def answer(http: HttpRequest) -> Response:
        request_id = http.path_params["id"]
        access = grant_of(http, request_id)
        if access is None:
            return signed_out(http)
        grant = access if isinstance(access, Grant) else None
        form, refused = await read_form(http)
        if refused is not None or form is None:
            status, message = refused or (400, "The form could not be read.")
            return await problem(http, status, "Not sent", message, request_id, grant)
        if not (
            csrf_ok(http, auth, form) if grant is None else csrf_matches(http, form, links.csrf_for(grant))
        ):
            return await problem(
                http,
                403,
                "Not sent",
                "This form did not come from your inbox, or it is out of date. Reload and try again.",
                request_id,
                grant,
            )
        fields: dict[str, str | None] = {}
        for name, limit in REPLY_FIELDS.items():
            value = form.get(name, "")
            if len(value) > limit:
                return await problem(
                    http, 422, "Not sent", f"The {name} is longer than {limit} characters.", request_id, grant
                )
            fields[name] = value if value.strip() else None
        decision = fields["decision"]
        if decision is not None and decision not in ("approve", "deny"):
            return await problem(
                http, 422, "Not sent", "The decision must be approve or deny.", request_id, grant
            )
        # the button pressed says what the answer is: a decision, else a choice, else the text
        what = "decision" if decision is not None else "choice" if fields["choice"] is not None else "text"
        channel, responder = (
            (web_channel, WEB_RESPONDER) if grant is None else (grant.channel, grant.responder)
        )
        reply = Reply(channel=channel, responder=responder, comment=fields["comment"], **{what: fields[what]})
        broker = await get_broker()
        try:
            verdict = await broker.resolve(request_id, reply)
        except NotFound:
            return await problem(http, 404, "Not found", "There is no request with that id.", grant=grant)
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
                **base_context(0 if grant else await pending_count(broker), "message", grant),
            )
        if wants_json(http):
            return JSONResponse(
                {"ok": True, "message": success_message(settled), "status": settled.status.value}
            )
        inbox_next = form.get("next") == "inbox" and grant is None
        target = "/?answered=" + settled.id if inbox_next else f"/requests/{settled.id}"
        return RedirectResponse(target, status_code=303)

    async def dismiss(http: HttpRequest) -> Response:
        if not auth.can_read(http):
            return signed_out(http)
        form, refused = await read_form(http)
        if refused is not None or form is None:
            status, message = refused or (400, "The form could not be read.")
            return await problem(http, status, "Not dismissed", message)
        if not csrf_ok(http, auth, form):
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
        if not auth.can_read(http):
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
        pending = sum(1 for r in scanned if r.status == Status.PENDING)
        if len(scanned) >= HISTORY_SCAN:
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
            **base_context(pending, "history"),
        )

    async def login(http: HttpRequest) -> Response:
        if not auth.check_token(http.query_params.get("token")):
            return render(
                "signin.html", 401, page="signin", signed_in=False, now=now(), pending_count=0, bad_link=True
            )
        response = RedirectResponse(safe_next(http.query_params.get("next")), status_code=303)
        response.set_cookie(COOKIE, auth.session_cookie, httponly=True, samesite="strict", path="/")
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    async def open_link(http: HttpRequest) -> Response:
        """A link from a host's URL-mode elicitation: spend it, grant its request, show the request."""
        grant = links.read(http.path_params["token"])
        if grant is None:
            return _link_problem(404, "Link not valid", "This link is not valid. Copy it whole.")
        if grant.expired:
            return _link_problem(410, "Link expired", "This link has expired.")
        broker = await get_broker()
        if await broker.get(grant.request_id) is None:
            return _link_problem(404, "Link not valid", "There is no such request.")
        if not await broker.first_seen(SPENT, grant.nonce):
            return _link_problem(
                409, "Link already used", "This link was already opened; each link works once."
            )
        await broker.record(grant.request_id, "link_opened", grant.responder, {"channel": grant.channel})
        response = RedirectResponse(grant.page, status_code=303)
        response.set_cookie(
            GRANT_COOKIE,
            links.grant_cookie(grant),
            max_age=max(1, grant.expires - int(now())),
            httponly=True,
            samesite="lax",  # the link is often opened from another site (a host's web page)
            path=grant.page,
        )
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

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
        Route("/login", login, methods=["GET"]),
        Route(LINK_PATH, open_link, methods=["GET"]),
        Route("/requests/{id}", show, methods=["GET"]),
        Route("/requests/{id}/answer", answer, methods=["POST"]),
        Route("/history", history, methods=["GET"]),
        Route("/notifications/dismiss", dismiss, methods=["POST"]),
        Route("/notifications/{id}/dismiss", dismiss, methods=["POST"]),
        Route("/manifest.webmanifest", manifest, methods=["GET"]),
        Route("/sw.js", service_worker, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]


def _link_problem(status: int, title: str, message: str) -> HTMLResponse:
    return render(
        "message.html", status, title=title, message=message, signed_in=False, now=now(), page="message"
    )


def _shell_hash(urls: list[str]) -> str:
    return hashlib.sha256("\n".join(urls).encode()).hexdigest()[:10]
