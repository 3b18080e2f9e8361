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
