"""Small network facts shared by the runtime and channels."""

from __future__ import annotations

import ipaddress


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
