"""Small network facts shared by the runtime and channels."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterable
from urllib.parse import urlsplit, urlunsplit


def is_loopback(host: str) -> bool:
    """Whether a host name or address stays on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def http_url(host: str, port: int) -> str:
    """``http://host:port``, with brackets around an IPv6 address."""
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def browser_url(host: str, port: int) -> str:
    """Where a browser on this machine reaches a server bound to ``host``: a wildcard bind (every
    address) is reached on loopback."""
    return http_url({"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host), port)


def redact(url: str) -> str:
    """A database URL with its password as ``***`` and without its query (which may hold one)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, host = netloc.rpartition("@")
            user = userinfo.partition(":")[0]
            netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    except ValueError:
        return "postgresql://***"


async def read_within(chunks: AsyncIterable[bytes], most: int) -> bytes | None:
    """A request's whole body from its ``stream()``, or None once it grows past ``most`` bytes (the
    rest is not read): what every inbound route takes before it parses anything."""
    body = b""
    async for chunk in chunks:
        body += chunk
        if len(body) > most:
            return None
    return body
