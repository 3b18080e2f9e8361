"""Running it: the listening socket, uvicorn on it, and the MCP transport (stdio, with the inbox and
webhooks served beside it, or HTTP / SSE in the same app); what is said at start, and the one line
that says why it cannot start.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from hitl_mcp.channels import missing_libraries
from hitl_mcp.config import Config
from hitl_mcp.kit import listening
from hitl_mcp.kit.net import browser_url, http_url, is_loopback
from hitl_mcp.kit.terminal import visible
from hitl_mcp.runtime import ConfigRefused, Runtime, Transport, check_database, prepare_state_dir
from hitl_mcp.store.select import DB_FILE
from hitl_mcp.web.auth import login_link
from hitl_mcp.web.deadline import DEFAULT_HEADER_TIMEOUT, with_header_deadline

# imported when first needed, so that over stdio `initialize` is answered before they load
SIDE_MODULES = (
    "uvicorn",
    "aiosqlite",
    "hitl_mcp.broker",
    "hitl_mcp.store.sqlite",
    "hitl_mcp.web.app",
    "hitl_mcp.web.limits",
)

#: over stdio, how long the side work (store, channels, inbox) may wait for a first tool call
SIDE_WORK_GRACE = 1.0

log = logging.getLogger("hitl_mcp")


def port_taken(host: str, port: int) -> str:
    return (
        f"port {port} on {host} is already in use (another hitl-mcp?): choose another port with --port, "
        "$HITL_PORT, server.http.port in the config, or make run PORT=<port>"
    )


#: connections the kernel queues before they are accepted: thousands of held calls opened in a burst
#: (a fleet of agents reconnecting after a restart) must not overflow it. Linux caps it at
#: net.core.somaxconn (4096 by default since 5.4); uvicorn's own default is 2048.
BACKLOG = 65535


def bind(host: str, port: int) -> socket.socket | None:
    """A listening socket, or None when the port is taken (another instance has it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP stated, so asyncio sets TCP_NODELAY on accepted connections (else ~40 ms per response)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            return None
        raise
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def _inbox_elsewhere(state_dir: Path, host: str, port: int) -> None:
    """Over stdio, when the inbox's port is taken. Usually by another hitl-mcp on this state directory
    (``make run``, or another host window's server): then all is well, and said so. Otherwise by some
    other program, and this server has no inbox of its own: that needs a port."""
    address = browser_url(host, port)
    if any(server.url == address for server in listening.running(state_dir)):
        log.info(
            "hitl-mcp: the inbox at %s is served by another hitl-mcp on this state directory; this server "
            "shares its database (%s), so requests from here show there",
            address,
            state_dir,
        )
        return
    log.warning(
        "hitl-mcp: port %d on %s is taken by a program that is not a hitl-mcp on this state directory: "
        "this server runs without an inbox (its requests are in %s); to serve one, choose another port "
        "with --port, $HITL_PORT or server.http.port in the config",
        port,
        host,
        state_dir,
    )


class HttpServer:
    """uvicorn on a socket we bound; ``stop`` ends it gracefully (no cancellation tracebacks)."""

    def __init__(
        self, app: Starlette, sock: socket.socket, header_timeout: float = DEFAULT_HEADER_TIMEOUT
    ) -> None:
        import uvicorn

        config = uvicorn.Config(
            app,
            http=with_header_deadline(header_timeout),  # a client that never ends its headers is cut off
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.sock = sock

    async def run(self) -> None:
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            self.server.should_exit = True

    def stop(self) -> None:
        self.server.should_exit = True


async def serve(config: Config, state_dir: Path, transport: Transport, host: str, port: int) -> None:
    if not is_loopback(host) and not _token_configured(config):
        raise ConfigRefused(
            f"refusing to listen on {host}: off loopback, set a web token first "
            "(channels.<web>.token in the config, or $HITL_WEB_TOKEN)"
        )
    missing = missing_libraries(config.channels)
    if missing:
        raise ConfigRefused(missing)
    prepare_state_dir(state_dir)
    check_database(state_dir / DB_FILE)
    runtime = Runtime(config, state_dir)
    url = http_url(host, port)
    if host not in ("0.0.0.0", "::"):  # a wildcard is no address for a browser: needs public_url
        runtime.inbox_url = runtime.inbox_url or url
    runtime.local_url = runtime.inbox_url or browser_url(host, port)
    with _root_logging_kept():
        mcp = runtime.build_mcp()
    sock = bind(host, port)
    if sock is None and transport != "stdio":
        raise ConfigRefused(port_taken(host, port))
    if sock is None:
        _inbox_elsewhere(state_dir, host, port)
    try:
        await serve_runtime(runtime, mcp, transport, host, sock, url, state_dir)
    except BaseExceptionGroup as group:  # surface the one that says why, not the group
        unavailable: ConfigRefused | BaseExceptionGroup[ConfigRefused] | None
        unavailable, _ = group.split(ConfigRefused)
        while isinstance(unavailable, BaseExceptionGroup):
            unavailable = unavailable.exceptions[0]
        if unavailable is not None:
            raise unavailable from None
        raise


async def serve_runtime(
    runtime: Runtime,
    mcp: MCPServer,
    transport: Transport,
    host: str,
    sock: socket.socket | None,
    url: str,
    state_dir: Path,
) -> None:
    """Serve until the end; while the socket is ours, its address is recorded in the state directory
    for the other verbs (and servers) to find (``kit.listening``)."""
    recorded = None
    if sock is not None:
        recorded = listening.record(state_dir, browser_url(host, sock.getsockname()[1]), transport)
    try:
        await _serve_runtime(runtime, mcp, transport, host, sock, url, state_dir)
    finally:
        listening.forget(recorded)


async def _serve_runtime(
    runtime: Runtime,
    mcp: MCPServer,
    transport: Transport,
    host: str,
    sock: socket.socket | None,
    url: str,
    state_dir: Path,
) -> None:
    refused: list[ConfigRefused] = []  # why the store and channels could not start
    if transport != "stdio":
        assert sock is not None
        _announce(runtime, transport, url)
        port = sock.getsockname()[1]
        app = runtime.http_app(mcp, transport, host, port)
        http = HttpServer(app, sock, runtime.config.server.http.header_timeout)
        resume_collector()

        async def side() -> None:
            """The store and channels; when they cannot start, uvicorn stops gracefully, and the one
            line that says why is all that is printed (no cancelled server's traceback)."""
            try:
                await runtime.run()
            except ConfigRefused as exc:
                refused.append(exc)
                http.stop()

        async with anyio.create_task_group() as tg:
            tg.start_soon(side)
            await http.run()
            tg.cancel_scope.cancel()
        if refused:
            raise refused[0]
        return

    http_server: HttpServer | None = None
    http_done = anyio.Event()

    async def side_runtime() -> None:
        """The store and channels; when they cannot start, the inbox stops gracefully, then stdio."""
        try:
            await runtime.run()
        except ConfigRefused as exc:
            refused.append(exc)
            if http_server is not None:
                http_server.stop()
                with anyio.move_on_after(3):
                    await http_done.wait()
            tg.cancel_scope.cancel()

    async def side_work() -> None:
        """The store, channels and inbox: loaded in a thread, so stdio answers `initialize` first."""
        nonlocal http_server
        try:
            # a host sends initialize and tools/list at once, then its first tool call: loading the
            # side work meanwhile would compete for the GIL with those answers
            with anyio.move_on_after(SIDE_WORK_GRACE):
                await runtime.wanted.wait()
            resume_collector()  # the start is served; the first tool call waits for the store anyway
            await anyio.to_thread.run_sync(_import_side_modules)
            tg.start_soon(side_runtime)
            if sock is not None:
                _announce(runtime, transport, url)
                port = sock.getsockname()[1]
                app = runtime.http_app(None, transport, host, port)
                http_server = HttpServer(app, sock, runtime.config.server.http.header_timeout)
                await http_server.run()
        finally:
            http_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(side_work)
        await mcp.run_stdio_async()
        if http_server is not None:  # let uvicorn close its connections rather than cancel it
            http_server.stop()
            with anyio.move_on_after(3):
                await http_done.wait()
        tg.cancel_scope.cancel()
    if refused:
        raise refused[0]


class _Visible(logging.Formatter):
    """Log lines quote agents (a client's name) and providers: their control characters are shown."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)  # stdout belongs to the stdio transport
    handler.setFormatter(_Visible("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("hitl_mcp").setLevel(level.upper())


def loop_options() -> dict[str, Any]:
    """uvloop where it is installed (it is a dependency except on Windows): a faster event loop."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def resume_collector() -> None:
    """The start is over: turn the garbage collector back on (``cli.main`` pauses it for a server's
    start), and first take what is loaded out of its full passes. That lives as long as the process,
    and each full pass would walk every SDK type and schema again, a pause that lands on whichever reply
    is being answered. Over HTTP this runs before serving; over stdio once ``initialize`` and
    ``tools/list`` are answered, before the side work loads."""
    gc.collect()
    gc.freeze()
    gc.enable()


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """``MCPServer()`` calls the SDK's ``configure_logging``, which imports rich where it is installed
    (~20 ms of a cold start) for a handler that ``logging.basicConfig`` drops when the root logger has
    handlers already (``setup_logging`` set them). Then the call changes nothing: it is skipped."""
    import mcp.server.mcpserver.server as sdk

    names = vars(sdk)
    saved = names.get("configure_logging")
    skip = saved is not None and bool(logging.getLogger().handlers)
    if skip:
        names["configure_logging"] = lambda *args, **kwargs: None
    try:
        yield
    finally:
        if skip:
            names["configure_logging"] = saved


def _import_side_modules() -> None:
    import importlib

    for name in SIDE_MODULES:
        importlib.import_module(name)


def _announce(runtime: Runtime, transport: Transport, url: str) -> None:
    """Where the inbox is. The login link, which holds the web token, only on a terminal: never into a
    log file or a host's log (``hitl-mcp inbox`` prints it whenever it is wanted)."""
    address = runtime.local_url or url
    log.warning(
        "hitl-mcp: inbox at %s (sign in with the link `hitl-mcp inbox` prints; web token: %s)",
        address,
        runtime.auth.source,
    )
    if sys.stderr.isatty():
        print(f"hitl-mcp: open the inbox: {login_link(address, runtime.auth.token)}", file=sys.stderr)
    if transport == "http":
        log.warning("hitl-mcp: MCP (streamable HTTP) at %s/mcp", url)
    elif transport == "sse":
        log.warning("hitl-mcp: MCP (SSE) at %s/sse", url)


def _token_configured(config: Config) -> bool:

    tokens = [getattr(c, "token", None) for c in config.channels.values() if c.type == "web"]
    return any(tokens) or bool(os.environ.get("HITL_WEB_TOKEN"))
