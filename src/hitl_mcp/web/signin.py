"""Signing in to the inbox and URL-mode elicitation links (``/link/{token}``).

Signing in proves the web token once and starts a new inbox session (``sessions.py``), either with
the login link (``GET /login?token=...``: the token then leaves the address bar by a redirect) or
by pasting the token into the sign-in form (``POST /login``, with the form's own CSRF token, see
``sessions.py``). Wrong tokens are limited per client address (``throttle.py``): past the limit
both answer 429 with ``Retry-After``, whatever the token. The page names the inbox's real address
(``server.public_url``, else the one the browser used).

A link is not a credential: whoever opens it must be signed in (the MCP spec forbids
pre-authenticated links, and an agent that reads the link must not be able to answer its own
request).
"""

from __future__ import annotations

import html

from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.core.models import now
from hitl_mcp.web.deps import web
from hitl_mcp.web.links import LINK_PATH, SPENT
from hitl_mcp.web.pagekit import PAGE_HEADERS, read_form, render, safe_next, wants_json
from hitl_mcp.web.people import actor
from hitl_mcp.web.sessions import SIGNIN_COOKIE, Sessions, cookie_name

NO_TRACE = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def signin_page(http: HttpRequest, sessions: Sessions, status: int = 401, **context: object) -> Response:
    """The sign-in page: where the inbox is, the token field (with its CSRF token and cookie) and how
    to get the login link."""
    form = sessions.signin_form(http)
    response = render(
        "signin.html",
        status,
        page="signin",
        signed_in=False,
        now=now(),
        pending_count=0,
        address=sessions.address(http),
        signin_csrf=form.csrf,
        **context,
    )
    form.set_cookie(http, response)
    return response


def signed_out(http: HttpRequest, sessions: Sessions, then: str | None = None) -> Response:
    if wants_json(http):
        return JSONResponse({"ok": False, "error": "Sign in first."}, status_code=401)
    return signin_page(http, sessions, then=then)


async def _signed_in(http: HttpRequest, client: str, then: str | None) -> Response:
    deps = web(http)
    deps.throttle.succeeded(client)
    response = RedirectResponse(safe_next(then), status_code=303, headers=NO_TRACE)
    await deps.sessions.start(http, response)
    form_cookie = cookie_name(http, SIGNIN_COOKIE)
    if form_cookie in http.cookies:  # the sign-in form's nonce has done its work
        response.delete_cookie(form_cookie, path="/login", httponly=True, samesite="strict")
    return response


def _too_many(http: HttpRequest, wait: int, then: str | None) -> Response:
    response = signin_page(http, web(http).sessions, 429, then=then, too_many=wait)
    response.headers["Retry-After"] = str(wait)
    return response


async def login(http: HttpRequest) -> Response:
    """The login link: ``/login?token=...``; without a token, the sign-in page."""
    deps = web(http)
    token = http.query_params.get("token")
    then = http.query_params.get("next")
    if token is None:
        return signin_page(http, deps.sessions, 200, then=then if then and then != "/" else None)
    client = _client(http)
    wait = deps.throttle.retry_after(client)
    if wait is not None:
        return _too_many(http, wait, then)
    if not deps.sessions.auth.check_token(token):
        deps.throttle.failed(client)
        return signin_page(http, deps.sessions, bad_link=True)
    return await _signed_in(http, client, then)


async def login_form(http: HttpRequest) -> Response:
    """The sign-in form: the token pasted, with the form's CSRF token and its cookie."""
    deps = web(http)
    form, refused = await read_form(http)
    if refused is not None or form is None:
        status, message = refused or (400, "The form could not be read.")
        return signin_page(http, deps.sessions, status, problem=message)
    then = form.get("next") or None
    if not deps.sessions.signin_csrf_ok(http, form.get("csrf")):
        return signin_page(
            http,
            deps.sessions,
            403,
            then=then,
            problem="This form did not come from this page, or it is out of date. Try again.",
        )
    client = _client(http)
    wait = deps.throttle.retry_after(client)
    if wait is not None:
        return _too_many(http, wait, then)
    if not deps.sessions.auth.check_token(form.get("token", "").strip()):
        deps.throttle.failed(client)
        return signin_page(http, deps.sessions, then=then, problem="That is not the web token. Try again.")
    return await _signed_in(http, client, then)


async def open_link(http: HttpRequest) -> Response:
    """A link from a host's URL-mode elicitation, to one request's page: checked, then spent
    once by a signed-in browser, then a redirect to the request."""
    deps = web(http)
    token = http.path_params["token"]
    link = deps.links.read(token)
    if link is None:
        return _link_problem(404, "Link not valid", "This link is not valid. Copy it whole.")
    if link.expired:
        return _link_problem(410, "Link expired", "This link has expired.")
    if await deps.sessions.read(http) is None:  # not spent: it works once signed in
        if http.headers.get("sec-fetch-site") == "cross-site":
            return _from_our_origin(http.url.path)
        return signed_out(http, deps.sessions, then=f"/link/{token}")
    broker = await deps.broker()
    if await broker.get(link.request_id) is None:
        return _link_problem(404, "Link not valid", "There is no such request.")
    if not await broker.first_seen(SPENT, link.nonce):
        return _link_problem(409, "Link already used", "This link was already opened; each link works once.")
    opened = {"channel": link.channel, "offered_to": link.responder}
    await broker.record(link.request_id, "link_opened", await actor(http), opened)
    return RedirectResponse(link.page, status_code=303, headers=NO_TRACE)


routes: list[BaseRoute] = [
    Route("/login", login, methods=["GET"]),
    Route("/login", login_form, methods=["POST"]),
    Route(LINK_PATH, open_link, methods=["GET"]),
]


def _client(http: HttpRequest) -> str:
    return http.client.host if http.client else "unknown"


def _from_our_origin(path: str) -> HTMLResponse:
    """A click on another site's page does not carry the SameSite=Strict session cookie: load the
    link once more from this page, our own origin, where the browser sends it. Still signed out
    there (``Sec-Fetch-Site: same-origin``), the link asks to sign in."""
    target = html.escape(path, quote=True)
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={target}"><title>Opening… · hitl-mcp</title></head>'
        f'<body><p><a href="{target}">Open the request in the inbox</a></p></body></html>'
    )
    return HTMLResponse(body, headers=PAGE_HEADERS)


def _link_problem(status: int, title: str, message: str) -> HTMLResponse:
    return render(
        "message.html", status, title=title, message=message, signed_in=False, now=now(), page="message"
    )
