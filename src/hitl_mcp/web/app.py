"""The one Starlette app: its routes, what its endpoints share, how errors are rendered, and the
middleware around it (body limit; Host and Origin on loopback; MCP's credential check).

``build_app`` is all the runtime calls. The endpoints find what they need on ``app.state.web``
(``deps.Web``); a ``Problem`` an endpoint raises is answered here, as JSON or as a page.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Literal

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hitl_mcp.broker import Broker
from hitl_mcp.channels import channel_module
from hitl_mcp.channels.base import Channel
from hitl_mcp.kit.net import is_loopback
from hitl_mcp.web import api, batch, devices, events, pages, people, pwa, receipts, rules, signin, stepup
from hitl_mcp.web.auth import WebAuth
from hitl_mcp.web.credentials import Credentials
from hitl_mcp.web.deps import Web, page_context
from hitl_mcp.web.errors import Problem, SignedOut
from hitl_mcp.web.links import RequestLinks
from hitl_mcp.web.pagekit import render, wants_json
from hitl_mcp.web.sessions import Sessions

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from hitl_mcp.config import Config
    from hitl_mcp.core.store import Store
    from hitl_mcp.web.oauth import OAuth

Transport = Literal["stdio", "sse", "http"]
GetBroker = Callable[[], Awaitable[Broker]]


async def render_problem(http: HttpRequest, exc: Exception) -> Response:
    """JSON for the API and for whoever asks for it (``Accept: application/json``), else a page."""
    assert isinstance(exc, Problem)
    if isinstance(exc, SignedOut) and not exc.api:
        return signin.signed_out(http, http.app.state.web.sessions, then=exc.then)
    if exc.api or wants_json(http):
        return JSONResponse(
            {"ok": False, "error": exc.message, **exc.extra}, status_code=exc.status_code, headers=exc.headers
        )
    context = {"title": exc.title, "message": exc.message, "request_id": exc.request_id, **exc.context}
    return render(exc.template, exc.html_status, **context, **await page_context(http, exc.page))


def build_app(
    config: Config,
    get_broker: GetBroker,
    auth: WebAuth,
    web_channel: str,
    mcp: MCPServer | None,
    transport: Transport,
    host: str,
    port: int | None = None,
    mcp_front: Callable[[ASGIApp], ASGIApp] | None = None,
) -> Starlette:
    """The one HTTP app. ``port`` is the bound port: on loopback, the Host and Origin a request
    may name (None, for an app served in process without a socket: any port of those names).
    ``mcp_front``: what the MCP face puts in front of its streamable HTTP endpoint, inside the
    credential check."""
    from mcp.server.transport_security import TransportSecuritySettings

    from hitl_mcp.web.limits import BodyLimit
    from hitl_mcp.web.rebinding import Allowed, HostCheck

    public_url = config.server.public_url
    routes: list[BaseRoute] = [Route("/healthz", api.healthz, methods=["GET"])]
    routes += api.routes + signin.routes + people.routes + pages.routes + pwa.routes + events.routes
    routes += rules.routes + batch.routes + stepup.routes + devices.routes + receipts.routes
    routes += channel_routes(config, get_broker)
    lifespan = None
    # on loopback, HostCheck (below) checks Host and Origin for every route, MCP's included, with
    # the bound port and public_url: the SDK's own check (three fixed names, any port) stands aside
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    agents = {name: agent.token.get_secret_value() for name, agent in config.agents.items()}
    oauth = _oauth(config, get_broker, auth)
    if oauth is not None:
        routes += oauth.routes()
    credentials = Credentials(auth, agents, get_broker, oauth)
    if mcp is not None and transport == "http":
        inner = mcp.streamable_http_app(host=host, transport_security=security)
        # first, after /healthz: the router tries each route's pattern in turn, and every poll of a
        # task and every held call would otherwise be matched against all the inbox's routes first
        routes[1:1] = _guarded(inner.routes, credentials, mcp_front)

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with mcp.session_manager.run():
                yield

    elif mcp is not None and transport == "sse":
        inner = mcp.sse_app(host=host, transport_security=security)
        routes += _guarded(inner.routes, credentials)
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={Problem: render_problem})
    inbox = next((ch for ch in config.channels.values() if ch.type == "web"), None)
    app.state.web = Web(
        get_broker,
        Sessions(auth, get_broker, public_url),
        web_channel,
        RequestLinks(auth),
        operator_answers=getattr(inbox, "operator_answers", "all"),
    )
    app.state.oauth = oauth
    app.add_middleware(BodyLimit, max_bytes=config.server.http.max_body_bytes)
    if is_loopback(host):  # added last: it runs first
        app.add_middleware(HostCheck, allowed=Allowed.for_bind(host, port, public_url))
    return app


def _oauth(config: Config, get_broker: GetBroker, auth: WebAuth) -> OAuth | None:
    """``server.oauth``, built (``oauth/``); None without it."""
    settings = config.server.oauth
    if settings is None or config.server.public_url is None:
        return None
    from hitl_mcp.web.oauth import OAuth

    async def get_store() -> Store:
        return (await get_broker()).store

    return OAuth(settings, config.server.public_url, config.people, get_store, auth.signer("oauth-consent"))


def channel_routes(config: Config, get_broker: GetBroker) -> list[BaseRoute]:
    """Each channel's webhook routes under ``/webhooks/<name>``; built without the broker."""
    routes: list[BaseRoute] = []
    per_type = Counter(cfg.type for cfg in config.channels.values())
    for name, cfg in config.channels.items():
        cls = channel_module(cfg.type).Channel
        if cls.routes is Channel.routes:
            continue
        lazy = [Mount("/", app=LazyRoutes(get_broker, name))]
        routes.append(Mount(f"/webhooks/{name}", routes=lazy))
        alias = cls.webhook_alias
        if alias and alias != name and per_type[cfg.type] == 1 and alias not in config.channels:
            routes.append(Mount(f"/webhooks/{alias}", routes=lazy))
    return routes


class LazyRoutes:
    """A channel's routes, taken from the live channel once the broker is up."""

    def __init__(self, get_broker: GetBroker, name: str) -> None:
        self.get_broker = get_broker
        self.name = name
        self._app: Starlette | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            broker = await self.get_broker()
            self._app = Starlette(routes=broker.channels[self.name].routes())
        await self._app(scope, receive, send)


def _guarded(
    routes: list[BaseRoute], credentials: Credentials, front: Callable[[ASGIApp], ASGIApp] | None = None
) -> list[BaseRoute]:
    """MCP's routes, each behind the credential check (``credentials.py``), on every bind."""
    for route in routes:
        inner: ASGIApp | None = getattr(route, "app", None)
        if inner is not None:
            route.app = credentials.guard(inner if front is None else front(inner))  # type: ignore[attr-defined]
    return routes
