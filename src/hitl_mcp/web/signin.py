"""Signing in to the inbox (``GET /login?token=...``) and URL-mode elicitation links (``/link/{token}``).

Signing in proves the web token once and starts a new inbox session (``sessions.py``); the token
then leaves the address bar by a redirect. A link is not a credential: whoever opens it must be
signed in (the MCP spec forbids pre-authenticated links, and an agent that reads the link must not
be able to answer its own request).
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable

from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.models import now
from hitl_mcp.web import WEB_RESPONDER
from hitl_mcp.web.links import LINK_PATH, SPENT, RequestLinks
from hitl_mcp.web.pages import PAGE_HEADERS, render, safe_next, signed_out
from hitl_mcp.web.sessions import Sessions

GetBroker = Callable[[], Awaitable[Broker]]

NO_TRACE = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def signin_routes(get_broker: GetBroker, sessions: Sessions) -> list[BaseRoute]:
    auth = sessions.auth
    links = RequestLinks(auth)

    async def login(http: HttpRequest) -> Response:
        if not auth.check_token(http.query_params.get("token")):
            return render(
                "signin.html", 401, page="signin", signed_in=False, now=now(), pending_count=0, bad_link=True
            )
        response = RedirectResponse(
            safe_next(http.query_params.get("next")), status_code=303, headers=NO_TRACE
        )
        await sessions.start(http, response)
        return response

    async def open_link(http: HttpRequest) -> Response:
        """A link from a host's URL-mode elicitation, to one request's page: checked, then spent
        once by a signed-in browser, then a redirect to the request."""
        token = http.path_params["token"]
        link = links.read(token)
        if link is None:
            return _link_problem(404, "Link not valid", "This link is not valid. Copy it whole.")
        if link.expired:
            return _link_problem(410, "Link expired", "This link has expired.")
        if await sessions.read(http) is None:  # not spent: it works once signed in
            if http.headers.get("sec-fetch-site") == "cross-site":
                return _from_our_origin(http.url.path)
            return signed_out(http, then=f"/link/{token}")
        broker = await get_broker()
        if await broker.get(link.request_id) is None:
            return _link_problem(404, "Link not valid", "There is no such request.")
        if not await broker.first_seen(SPENT, link.nonce):
            return _link_problem(
                409, "Link already used", "This link was already opened; each link works once."
            )
        opened = {"channel": link.channel, "offered_to": link.responder}
        await broker.record(link.request_id, "link_opened", WEB_RESPONDER, opened)
        return RedirectResponse(link.page, status_code=303, headers=NO_TRACE)

    return [
        Route("/login", login, methods=["GET"]),
        Route(LINK_PATH, open_link, methods=["GET"]),
    ]


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
