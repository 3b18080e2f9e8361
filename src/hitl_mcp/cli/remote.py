"""``answer``, ``approve`` and ``deny`` under ``server.cli.require_token``: through the running
server's HTTP API with the web token, never by writing the database.

Without it, the answering verbs write the database in the state directory, so anyone who can run
them as the server's user (an agent with a shell, say) can answer. With it, they need the token
(``$HITL_WEB_TOKEN`` or ``--token-file``) and a server to talk to. That separates the person from
the agent only when the server runs as another user with its state directory at mode 0700: then the
agent's user cannot read the database or the token file, let alone write them (see
docs/security-audit.md).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hitl_mcp.config import Config, resolve_http_port, resolve_state_dir
from hitl_mcp.kit import listening
from hitl_mcp.kit.net import browser_url
from hitl_mcp.kit.terminal import visible

TIMEOUT = 30.0


class RemoteError(Exception):
    """One line for the person at the terminal."""


def no_match(prefix: str) -> str:
    """No request has this id, nor starts with it (a start counts from 4 characters)."""
    if len(prefix) < 4:
        return f"no request has the id {prefix!r}: give the whole id, or its first 4 characters or more"
    return f"no request matches {prefix!r} (see: hitl-mcp pending)"


def server_url(config: Config, given: str | None, state_dir: Path | None = None) -> str:
    if given:
        return given.rstrip("/")
    return local_address(config, state_dir)


def local_address(
    config: Config, state_dir: Path | None, port: int | None = None, *, mcp: bool = False
) -> str:
    """Where this machine reaches the server: ``--port``, else ``$HITL_PORT``, else where a server on
    the state directory says it listens (``make run PORT=19001``: ``kit.listening``; one serving MCP
    over HTTP when ``mcp``), else ``server.http`` in the config."""
    if port is None and not os.environ.get("HITL_PORT", "").strip() and state_dir is not None:
        found = listening.address(state_dir, mcp=mcp)
        if found:
            return found
    return browser_url(config.server.http.host, resolve_http_port(config, port))


def web_token(token_file: str | None) -> str:
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text().strip()
        except OSError as exc:
            raise RemoteError(f"cannot read the token file {token_file}: {exc.strerror or exc}") from None
        if not token:
            raise RemoteError(f"the token file {token_file} is empty")
        return token
    token = os.environ.get("HITL_WEB_TOKEN", "").strip()
    if not token:
        raise RemoteError(
            "server.cli.require_token is set: answering goes through the server's API and needs the web "
            "token ($HITL_WEB_TOKEN or --token-file)"
        )
    return token


def reply(base: str, token: str, prefix: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST the reply to the request ``prefix`` names (its id, or a unique start of a pending one's);
    the request as the server returns it."""
    status, data = _call(base, token, "POST", f"/api/requests/{quote(prefix, safe='')}/reply", body)
    if status == 404 and len(prefix) >= 4:
        _, listing = _call(base, token, "GET", "/api/requests?status=pending&limit=1000")
        matches = [r["id"] for r in listing.get("requests", []) if str(r.get("id", "")).startswith(prefix)]
        if len(matches) == 1:
            status, data = _call(base, token, "POST", f"/api/requests/{matches[0]}/reply", body)
    if status == 200:
        return dict(data["request"])
    if status == 404:
        raise RemoteError(no_match(prefix))
    if status == 409:
        raise RemoteError(f"not recorded: {data.get('error', 'no longer pending')}")
    raise RemoteError(str(data.get("error") or f"the server answered {status}"))


def _call(base: str, token: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        base + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, _json(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise RemoteError(f"the server at {base} refused the web token (401)") from None
        return exc.code, _json(exc.read())
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RemoteError(f"cannot reach the server at {base} to answer: {reason}") from None


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def answer_via_api(config: Config, args: Any, fields: dict[str, Any]) -> int:
    """The answering verbs' remote path: prints ``<id>: <what>`` like the local one."""
    body = {name: value for name, value in fields.items() if value is not None}
    try:
        base = server_url(config, args.url, resolve_state_dir(config, args.state_dir))
        request = reply(base, web_token(args.token_file), args.id, body)
    except RemoteError as exc:
        print(f"hitl-mcp: {visible(exc, newlines=False)}", file=sys.stderr)
        return 1
    outcome = request.get("outcome") or {}
    what = outcome.get("answer") if request.get("kind") == "question" else None
    if what is None:
        what = "approved" if outcome.get("approved") else "denied"
    print(f"{request['id']}: {visible(what, newlines=False)}")
    return 0
