"""Host and Origin checks on a loopback bind: the defence against DNS rebinding.

On loopback the MCP endpoint needs no token, because nothing off this machine can reach it. A page
on another site can, though, through DNS rebinding: its own name resolves to the loopback address
once the page has loaded, and the browser then sends that name as the ``Host``. So on every loopback
bind, every route but ``/healthz`` (MCP, the API, the inbox, webhooks) checks the ``Host`` header and,
when a browser sends one, the ``Origin``. Allowed are the bound address with its port, ``localhost``
with that port, and ``server.public_url``'s host (a reverse proxy or tunnel in front). A foreign
``Host`` is answered 421, a foreign ``Origin`` 403; neither reaches a route.

``Origin: null`` passes: a browser sends it for a same-origin POST from a page whose referrer policy
is ``no-referrer`` (the inbox's), and it names no site a rebinding page could use. An IP address
matches in any spelling (``[0:0:0:0:0:0:0:1]`` is ``[::1]``).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

#: routes that answer whatever the Host (a load balancer's or a container's health check)
EXEMPT = frozenset({"/healthz"})

DEFAULT_PORTS = {"http": 80, "https": 443}


def canonical_host(name: str) -> str:
    """An address in its one spelling (``0:0:0:0:0:0:0:1`` -> ``::1``), a name in lower case."""
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        return name.lower()


# every request's Host: parsing it (urlsplit, ipaddress) was a sixth of what a poll of a task cost,
# and clients send the same few names again and again
@functools.lru_cache(maxsize=1024)
def split_netloc(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (``[v6]:port`` for IPv6) as its canonical host and port; None when malformed."""
    if not value or any(c in value for c in "@/?#\\ \t") or not value.isascii():
        return None
    try:
        parts = urlsplit("//" + value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return canonical_host(host), port


@dataclass(frozen=True)
class Allowed:
    """The names this server answers to: ``(host, port)``, a port of None meaning any."""

    local: frozenset[tuple[str, int | None]]
    """Reached directly on the loopback bind (plain http)."""
    public: frozenset[tuple[str, str, int]]
    """``(scheme, host, port)`` of ``server.public_url``: the proxy or tunnel in front of us."""

    @classmethod
    def for_bind(cls, host: str, port: int | None, public_url: str | None = None) -> Allowed:
        local = {(canonical_host(host), port), ("localhost", port)}
        public: set[tuple[str, str, int]] = set()
        if public_url:
            parts = urlsplit(public_url)
            if parts.hostname and parts.scheme in DEFAULT_PORTS:
                at = parts.port or DEFAULT_PORTS[parts.scheme]
                public.add((parts.scheme, canonical_host(parts.hostname), at))
        return cls(frozenset(local), frozenset(public))

    def host_ok(self, value: str | None) -> bool:
        parsed = split_netloc(value or "")
        if parsed is None:
            return False
        host, port = parsed
        for name, bound in self.local:
            if host == name and (bound is None or (port or 80) == bound):
                return True
        # a proxy passes the public name, with or without the port the browser used
        return any(host == name and port in (None, at) for _, name, at in self.public)

    def origin_ok(self, value: str | None) -> bool:
        if value is None or value == "null":
            return True
        try:
            parts = urlsplit(value)
        except ValueError:
            return False
        if parts.scheme not in DEFAULT_PORTS or parts.path or parts.query or parts.fragment:
            return False
        parsed = split_netloc(parts.netloc)
        if parsed is None:
            return False
        host, port = parsed
        port = port or DEFAULT_PORTS[parts.scheme]
        if parts.scheme == "http" and any(
            host == name and (bound is None or port == bound) for name, bound in self.local
        ):
            return True
        return (parts.scheme, host, port) in self.public

    def describe(self) -> str:
        names = [f"{_netloc(h)}:{p}" if p else _netloc(h) for h, p in sorted(self.local, key=str)]
        names += [f"{_netloc(h)}:{p}" for _, h, p in sorted(self.public)]
        return ", ".join(names)


def _netloc(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class HostCheck:
    """ASGI middleware: refuse a request whose Host or Origin is not one of ours."""

    def __init__(self, app: ASGIApp, allowed: Allowed) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self.allowed.host_ok(headers.get("host")):
            message = (
                "the Host header names a site this server does not answer to (DNS rebinding "
                f"protection); use one of: {self.allowed.describe()}"
            )
            await _refuse(421, message, scope, receive, send)
            return
        if not self.allowed.origin_ok(headers.get("origin")):
            message = f"requests from other sites are refused; this server is: {self.allowed.describe()}"
            await _refuse(403, message, scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _refuse(status: int, message: str, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await JSONResponse({"error": message}, status_code=status)(scope, receive, send)
