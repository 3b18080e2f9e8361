"""Wiring: config -> store -> broker -> channels -> HTTP app (``serving.py`` runs it on a socket and
the chosen MCP transport).

The store opens in the background: ``initialize`` and ``tools/list`` never wait for it, and the
first tool call does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hitl_mcp.broker import AskDefaults, Broker
from hitl_mcp.channels import channel_module
from hitl_mcp.channels.base import Channel
from hitl_mcp.config import Config
from hitl_mcp.host_forms import Linking
from hitl_mcp.models import Kind
from hitl_mcp.net import is_loopback
from hitl_mcp.server import Settings, build_server
from hitl_mcp.store.base import StoreError
from hitl_mcp.web.auth import TokenFileUnsafe, WebAuth, configured_web_auth
from hitl_mcp.web.links import RequestLinks

log = logging.getLogger("hitl_mcp")

Transport = Literal["stdio", "sse", "http"]
DB_FILE = "hitl.sqlite3"


class ConfigRefused(Exception):
    """The configuration is valid YAML but unsafe or impossible to run."""


class StoreUnavailable(ConfigRefused):
    """The database cannot be opened or written: no request would be kept, so none is accepted."""


def prepare_state_dir(state_dir: Path) -> None:
    """Create the state directory and prove it is writable, before anything is served."""
    probe = state_dir / f".probe-{os.getpid()}"
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigRefused(f"cannot write the state directory {state_dir}: {exc.strerror or exc}") from None


def check_database(path: Path) -> None:
    """Refuse a damaged database before anything is served or announced."""
    from hitl_mcp.store.health import database_problem

    problem = database_problem(path)
    if problem:
        raise StoreUnavailable(problem)


class Runtime:
    def __init__(self, config: Config, state_dir: Path) -> None:
        self.config = config
        self.state_dir = state_dir
        self._broker: Broker | None = None
        self._ready = anyio.Event()
        self._failed: BaseException | None = None
        self.wanted = anyio.Event()
        """Set when something first needs the broker: over stdio, the side work starts no later."""
        web = [name for name, ch in config.channels.items() if channel_module(ch.type).Channel.is_inbox]
        self.web_channel = web[0] if web else "api"
        try:
            self.auth: WebAuth = configured_web_auth(config, state_dir)
        except TokenFileUnsafe as exc:
            raise ConfigRefused(str(exc)) from None
        self.inbox_url: str | None = config.server.public_url
        """Where a person's browser reaches the inbox: ``server.public_url``, else where we listen."""
        self.local_url: str | None = None
        """Where a browser on this machine reaches it (a wildcard bind on loopback): the login link."""

    async def broker(self) -> Broker:
        self.wanted.set()
        await self._ready.wait()
        if self._broker is None:
            raise RuntimeError(f"hitl-mcp could not start its store: {self._failed}")
        return self._broker

    def settings(self) -> Settings:
        d = self.config.defaults
        return Settings(
            heartbeat_seconds=d.heartbeat_seconds,
            max_block_seconds=d.max_block_seconds,
            host_overrides={name: h.budget_seconds for name, h in self.config.hosts.items()},
            state_dir=self.state_dir,
            linking=Linking(self.inbox_url, RequestLinks(self.auth)) if self.inbox_url else None,
            agent=self.config.server.agent,
        )

    def build_mcp(self) -> MCPServer:
        return build_server(self.broker, self.settings())

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open the store, start the channels and the broker's loops; runs until cancelled."""
        from hitl_mcp.anchor import configured_anchor
        from hitl_mcp.store.sqlite import SqliteStore

        store = SqliteStore(self.state_dir / DB_FILE, configured_anchor(self.config, self.state_dir))
        channels: list[Channel] = []
        try:
            try:
                await store.open()
            except (OSError, sqlite3.Error, StoreError) as exc:
                raise StoreUnavailable(
                    f"cannot keep requests: the database {store.path} failed: {exc}"
                ) from exc
            d = self.config.defaults
            broker = Broker(
                store,
                {},
                AskDefaults(
                    channels={
                        Kind.QUESTION: d.ask_user.channels,
                        Kind.APPROVAL: d.request_approval.channels,
                        Kind.NOTIFICATION: d.notify_user.channels,
                    },
                    timeouts={Kind.QUESTION: d.ask_user.timeout, Kind.APPROVAL: d.request_approval.timeout},
                ),
                state_dir=self.state_dir,
                public_url=self.config.server.public_url,
            )
            for name, cfg in self.config.channels.items():
                channel = channel_module(cfg.type).Channel(name, cfg, broker)
                try:
                    await channel.start()
                except ImportError as exc:  # installed, yet broken: still one line, not a traceback
                    extra = type(channel).extra or cfg.type
                    raise ConfigRefused(
                        f"channel {name!r} (type {cfg.type}) cannot load {exc.name or 'a library'} "
                        f"({exc}): pip install 'mcp-hitl[{extra}]'"
                    ) from None
                channels.append(channel)
                broker.channels[name] = channel
            async with anyio.create_task_group() as tg:
                await tg.start(broker.run)
                self._broker = broker
                self._ready.set()
                task_status.started()
        except BaseException as exc:
            self._failed = exc
            self._ready.set()
            raise
        finally:
            with anyio.CancelScope(shield=True):
                for channel in reversed(channels):
                    with contextlib.suppress(Exception):
                        await channel.close()
                await store.close()

    def channel_routes(self) -> list[BaseRoute]:
        """Each channel's webhook routes under ``/webhooks/<name>``; built without the broker."""
        routes: list[BaseRoute] = []
        per_type = Counter(cfg.type for cfg in self.config.channels.values())
        for name, cfg in self.config.channels.items():
            cls = channel_module(cfg.type).Channel
            if cls.routes is Channel.routes:
                continue
            lazy = _LazyRoutes(self, name).routes()
            routes.append(Mount(f"/webhooks/{name}", routes=lazy))
            alias = cls.webhook_alias
            if alias and alias != name and per_type[cfg.type] == 1 and alias not in self.config.channels:
                routes.append(Mount(f"/webhooks/{alias}", routes=lazy))
        return routes

    def http_app(
        self, mcp: MCPServer | None, transport: Transport, host: str, port: int | None = None
    ) -> Starlette:
        """The one HTTP app. ``port`` is the bound port: on loopback, the Host and Origin a request
        may name (None, for an app served in process without a socket: any port of those names)."""
        from mcp.server.transport_security import TransportSecuritySettings

        from hitl_mcp.web.api import api_routes, healthz
        from hitl_mcp.web.limits import BodyLimit
        from hitl_mcp.web.rebinding import Allowed, HostCheck

        routes: list[BaseRoute] = [Route("/healthz", healthz, methods=["GET"])]
        routes += api_routes(self.broker, self.auth, self.web_channel, self.config.server.public_url)
        routes += self.channel_routes()
        lifespan = None
        # on loopback, HostCheck (below) checks Host and Origin for every route, MCP's included, with
        # the bound port and public_url: the SDK's own check (three fixed names, any port) stands aside
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        if mcp is not None and transport == "http":
            inner = mcp.streamable_http_app(host=host, transport_security=security)
            routes += [_guard(r, self.auth, host) for r in inner.routes]

            @contextlib.asynccontextmanager
            async def lifespan(_: Starlette) -> AsyncIterator[None]:
                async with mcp.session_manager.run():
                    yield

        elif mcp is not None and transport == "sse":
            inner = mcp.sse_app(host=host, transport_security=security)
            routes += [_guard(r, self.auth, host) for r in inner.routes]
        app = Starlette(routes=routes, lifespan=lifespan)
        app.add_middleware(BodyLimit, max_bytes=self.config.server.http.max_body_bytes)
        if is_loopback(host):  # added last: it runs first
            app.add_middleware(HostCheck, allowed=Allowed.for_bind(host, port, self.config.server.public_url))
        return app


class _LazyRoutes:
    """A channel's routes, taken from the live channel once the broker is up."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime = runtime
        self.name = name
        self._app: Starlette | None = None

    def routes(self) -> list[BaseRoute]:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if self._app is None:
                broker = await self.runtime.broker()
                self._app = Starlette(routes=broker.channels[self.name].routes())
            await self._app(scope, receive, send)

        return [Mount("/", app=app)]


def _guard(route: BaseRoute, auth: WebAuth, host: str) -> BaseRoute:
    """Off loopback, MCP itself needs the web token too."""
    if is_loopback(host):
        return route
    inner_app: ASGIApp | None = getattr(route, "app", None)
    if inner_app is None:
        return route

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.requests import HTTPConnection

        if scope["type"] == "http" and not auth.bearer_ok(HTTPConnection(scope)):
            from hitl_mcp.web.api import error

            await error(401, "missing or wrong bearer token")(scope, receive, send)
            return
        await inner_app(scope, receive, send)

    route.app = guarded  # type: ignore[attr-defined]
    return route
