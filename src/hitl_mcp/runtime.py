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
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from hitl_mcp.channels import channel_module
from hitl_mcp.channels.base import Channel
from hitl_mcp.config import Config
from hitl_mcp.core.models import Kind
from hitl_mcp.mcp.server import build_server
from hitl_mcp.mcp.settings import Settings
from hitl_mcp.web.auth import TokenFileUnsafe, WebAuth, configured_web_auth
from hitl_mcp.web.links import InboxLinking, RequestLinks

if TYPE_CHECKING:  # the broker and the store load in run(): over stdio, after the start is served
    from hitl_mcp.broker import Broker
    from hitl_mcp.core.store import Engine
    from hitl_mcp.store.seal import Sealer

log = logging.getLogger("hitl_mcp")

Transport = Literal["stdio", "sse", "http"]
RECEIPT_KEY_ENV = "HITL_RECEIPT_KEY"


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


def engine_of(config: Config, state_dir: Path, *, serving: bool = True) -> Engine:
    """The store a config runs on, with its audit anchor (not yet opened); ``StoreError`` when it
    cannot be (``store.select``)."""
    from hitl_mcp.store.anchor import configured_anchor
    from hitl_mcp.store.select import engine_for

    receivers = config.server.audit_anchor
    anchor = configured_anchor(
        state_dir,
        syslog=receivers.syslog,
        url=receivers.url.get_secret_value() if receivers.url else None,
    )
    pool = config.server.store_pool
    sealer = sealer_of(config, state_dir)
    return engine_for(
        config.server.store, state_dir, pool_size=pool, anchor=anchor, serving=serving, sealer=sealer
    )


def sealer_of(config: Config, state_dir: Path) -> Sealer:
    """What signs receipts: the configured key (``server.receipt_key``, ``$HITL_RECEIPT_KEY``), else the
    state directory's; ``BadKey`` when a configured one is not a key."""
    from hitl_mcp.core.records import StoreError
    from hitl_mcp.kit.jws import BadKey, load_key
    from hitl_mcp.store.seal import Sealer

    configured = config.server.receipt_key
    text = configured.get_secret_value() if configured else os.environ.get(RECEIPT_KEY_ENV)
    issuer = config.server.public_url or "hitl-mcp"
    types = {name: block.type for name, block in config.channels.items()}
    if not text:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # one that cannot be says so itself
    try:
        return Sealer(load_key(state_dir, text), issuer, types)
    except BadKey as exc:
        raise StoreError(f"server.receipt_key: {exc}") from None


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
        key = self.config.server.request_state_key
        return Settings(
            heartbeat_seconds=d.heartbeat_seconds,
            max_block_seconds=d.max_block_seconds,
            host_overrides={name: h.budget_seconds for name, h in self.config.hosts.items()},
            state_dir=self.state_dir,
            linking=InboxLinking(self.inbox_url, RequestLinks(self.auth)) if self.inbox_url else None,
            agent=self.config.server.agent,
            request_state_key=key.get_secret_value() if key is not None else None,
        )

    def build_mcp(self) -> MCPServer:
        from hitl_mcp.kit.state_key import BadStateKey

        try:
            return build_server(self.broker, self.settings())
        except BadStateKey as exc:
            raise ConfigRefused(f"cannot seal round-trip state: {exc}") from None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open the store, start the channels and the broker's loops; runs until cancelled."""
        from hitl_mcp.broker import AskDefaults, Broker
        from hitl_mcp.config.policy import policy_from_config
        from hitl_mcp.core.store import StoreError
        from hitl_mcp.store.select import failure

        try:
            store = engine_of(self.config, self.state_dir)
        except StoreError as exc:
            self._failed = exc
            self._ready.set()
            raise StoreUnavailable(f"cannot keep requests: {exc}") from None
        channels: list[Channel] = []
        try:
            try:
                await store.open()
            except (OSError, sqlite3.Error, StoreError) as exc:
                raise StoreUnavailable(f"cannot keep requests: {failure(store, exc)}") from exc
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
                policy=policy_from_config(self.config),
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

    def http_app(
        self, mcp: MCPServer | None, transport: Transport, host: str, port: int | None = None
    ) -> Starlette:
        """The one HTTP app (``web/app.py``), for this runtime's config, broker and web token."""
        from hitl_mcp.web.app import build_app

        return build_app(self.config, self.broker, self.auth, self.web_channel, mcp, transport, host, port)
