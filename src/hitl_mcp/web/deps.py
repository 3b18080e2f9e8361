"""What the web endpoints share, set once on ``app.state.web`` when the app is built (``app.py``), and
``requires``: authentication declared on an endpoint instead of checked inside it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import Response

from hitl_mcp.broker import Broker
from hitl_mcp.core.models import Status, now
from hitl_mcp.web.errors import Problem, SignedOut
from hitl_mcp.web.links import RequestLinks
from hitl_mcp.web.pagekit import read_form
from hitl_mcp.web.sessions import Access, Sessions
from hitl_mcp.web.throttle import Throttle

GetBroker = Callable[[], Awaitable[Broker]]
Endpoint = Callable[[HttpRequest], Awaitable[Response]]


@dataclass
class Web:
    get_broker: GetBroker
    sessions: Sessions
    web_channel: str
    """The name replies through the inbox and the API are recorded under."""
    links: RequestLinks
    throttle: Throttle = field(default_factory=Throttle)
    operator_answers: str = "all"
    """What the operator (the web token) may answer: ``all``, ``unaddressed`` or ``none``."""

    async def broker(self) -> Broker:
        return await self.get_broker()


def web(http: HttpRequest) -> Web:
    state: Web = http.app.state.web
    return state


def access(http: HttpRequest) -> Access:
    """Who is asking, as ``requires`` found it."""
    found: Access = http.state.access
    return found


def requires(*, api: bool = False, csrf_header: bool = False) -> Callable[[Endpoint], Endpoint]:
    """The bearer token or a live inbox session, else ``SignedOut``. ``csrf_header``: a session
    must also send its CSRF token in ``X-CSRF-Token`` (a cookie alone changes nothing: a page on
    another site could have made the browser send it)."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        @functools.wraps(endpoint)
        async def guarded(http: HttpRequest) -> Response:
            found = await web(http).sessions.read(http)
            if found is None or (csrf_header and not found.csrf_ok(http.headers.get("x-csrf-token"))):
                raise SignedOut(api=api)
            return await endpoint(http)

        return guarded

    return decorate


STALE_FORM = "This form did not come from your inbox, or it is out of date. Reload and try again."


async def read_post(
    http: HttpRequest, title: str, request_id: str | None = None, stale: str = STALE_FORM
) -> dict[str, str]:
    """A page's form, read within bounds, with the session's CSRF token (the ``csrf`` field or the
    ``X-CSRF-Token`` header); a bearer token needs none, since no browser sends one on its own."""
    form, refused = await read_form(http)
    if refused is not None or form is None:
        status, message = refused or (400, "The form could not be read.")
        raise Problem(status, message, title=title, request_id=request_id)
    if not access(http).csrf_ok(http.headers.get("x-csrf-token") or form.get("csrf")):
        raise Problem(403, stale, title=title, request_id=request_id)
    return form


async def page_context(http: HttpRequest, page: str) -> dict[str, Any]:
    """What every signed-in page's layout shows: the CSRF token, the pending count, the page, the
    kill switch's pause if approvals are paused (``kill_switch``; shown only to a signed-in reader,
    since it names who paused and why), and whether Web Push is configured (the Devices link)."""
    found: Access | None = getattr(http.state, "access", None)
    broker = await web(http).broker()
    return {
        "csrf": found.csrf if found else "",
        "pending_count": await broker.count_requests(Status.PENDING),
        "kill_switch": await broker.paused() if found else None,
        "page": page,
        "now": now(),
        "signed_in": True,
        "who_label": (found.person if found else None) or "operator",
        "push_on": any(c.type == "webpush" for c in broker.channels.values()),
    }
