"""``hitl-mcp inbox``: print the inbox's login link, which holds the web token; ``--open`` opens the
browser on it.

The address is ``server.public_url``, else where the server listens: ``--port`` or ``$HITL_PORT``,
else the address a running server recorded in the state directory (``make run PORT=19001``), else
``server.http`` in the config (a wildcard bind is reached on loopback). The token is the one the
server uses: the web channel's ``token``, else ``$HITL_WEB_TOKEN``, else the ``web-token`` file in
the state directory (made now if the server has not started yet, so that both agree). The link goes
to stdout only; whether a server answers there, and takes that token, is said on stderr.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path

from hitl_mcp.cli.remote import local_address
from hitl_mcp.cli.requests import CliError
from hitl_mcp.config import Config
from hitl_mcp.web.auth import TokenFileUnsafe, configured_web_auth, login_link

#: how long to wait for the server to say it is there
PROBE_SECONDS = 3.0


def inbox(config: Config, state_dir: Path, port: int | None, open_browser: bool) -> int:
    try:
        auth = configured_web_auth(config, state_dir)
    except TokenFileUnsafe as exc:
        raise CliError(str(exc)) from None
    address = (config.server.public_url or local_address(config, state_dir, port)).rstrip("/")
    link = login_link(address, auth.token)
    print(link)
    problem = server_problem(address, auth.token)
    if problem:
        print(f"hitl-mcp: {problem}", file=sys.stderr)
    if not open_browser:
        return 0
    if problem:
        print("hitl-mcp: not opening the browser: nothing there to sign in to", file=sys.stderr)
        return 1
    if not webbrowser.open(link):
        print("hitl-mcp: no browser could be opened here: open the link above in one", file=sys.stderr)
        return 1
    return 0


def server_problem(address: str, token: str) -> str | None:
    """Why the link would not work now (no server there, or one with another token), else None."""
    request = urllib.request.Request(
        f"{address}/api/requests?limit=1", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=PROBE_SECONDS):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            return (
                f"the server at {address} does not take this token: it runs with another state directory "
                "or web token (see --state-dir, $HITL_WEB_TOKEN, channels.<web>.token)"
            )
        return f"the server at {address} answered {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return (
            f"nothing answers at {address} yet ({reason}): start the server (make run, or hitl-mcp serve "
            "--transport http), or the MCP host that runs it; a server on another port is found by "
            "its state directory (--state-dir), or give --port or $HITL_PORT"
        )
