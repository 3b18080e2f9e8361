"""OAuth in tests: a server with ``server.oauth`` at a known address (its ``public_url`` is where it
listens), a client's redirect URI that keeps what comes back, a token store for the SDK's
``OAuthClientProvider``, and the authorization code flow walked by a plain HTTP client (the browser
tests walk it in Chromium instead)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from hitl_mcp.config import Config, parse_config
from hitl_mcp.runtime import Runtime
from hitl_mcp.serving import HttpServer, bind
from tests.conftest import TOKEN
from tests.support.events import Changes, until
from tests.support.serve import serving


def config_text(url: str, oauth: str = "{issuer: builtin}", extra: str = "", store: str = "sqlite") -> str:
    return f"""
server:
  public_url: {url}
  store: {store}
  oauth: {oauth}
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web, token: {TOKEN}}}
{extra}
"""


def oauth_config(
    url: str, oauth: str = "{issuer: builtin}", extra: str = "", store: str = "sqlite"
) -> Config:
    return parse_config(config_text(url, oauth, extra, store), source="test.yaml")


@dataclass
class Served:
    url: str
    runtime: Runtime
    app: Any

    @property
    def oauth(self) -> Any:
        """The app's ``web.oauth.OAuth`` (its built-in provider and grants)."""
        return self.app.state.oauth

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


@contextlib.asynccontextmanager
async def serve_oauth(
    state_dir: Path,
    oauth: str = "{issuer: builtin}",
    extra: str = "",
    *,
    store: str = "sqlite",
    url: str | None = None,
) -> AsyncIterator[Served]:
    """The whole HTTP app (MCP at /mcp) on a loopback port, its ``public_url`` that address (or
    ``url``: the address a balancer in front of it answers at)."""
    sock = bind("127.0.0.1", 0)
    assert sock is not None
    port = sock.getsockname()[1]
    own = f"http://127.0.0.1:{port}"
    runtime = Runtime(oauth_config(url or own, oauth, extra, store), state_dir)
    runtime.inbox_url = url or own
    app = runtime.http_app(runtime.build_mcp(), "http", "127.0.0.1", port)
    http = HttpServer(app, sock)
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        async with anyio.create_task_group() as web:
            web.start_soon(http.run)
            try:
                yield Served(own, runtime, app)
            finally:
                http.stop()
        sock.close()
        tg.cancel_scope.cancel()


@dataclass
class Callback:
    """A client's redirect URI: what the authorization server sends back to it."""

    url: str
    answers: list[dict[str, str]] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)

    async def next(self, seen: int = 0) -> dict[str, str]:
        answers = await until(lambda: self.answers[seen:], self.changes, seconds=30)
        return answers[0]


@contextlib.asynccontextmanager
async def callback_server() -> AsyncIterator[Callback]:
    holder: list[Callback] = []

    async def back(request: Request) -> PlainTextResponse:
        holder[0].answers.append(dict(request.query_params))
        holder[0].changes.fire()
        return PlainTextResponse("You can close this window.")

    app = Starlette(routes=[Route("/callback", back)])
    async with serving(app) as base:
        holder.append(Callback(f"{base}/callback"))
        yield holder[0]


class MemoryTokens:
    """The SDK client's ``TokenStorage``, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def hidden(page: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert match, f"no {name} field in the page"
    return html.unescape(match.group(1))


async def register(http: httpx2.AsyncClient, base: str, redirect: str, **extra: Any) -> dict[str, Any]:
    body = {
        "redirect_uris": [redirect],
        "client_name": "test app",
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        **extra,
    }
    r = await http.post(f"{base}/register", json=body)
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def consent_page(
    http: httpx2.AsyncClient, base: str, client_id: str, redirect: str, challenge: str, **params: str
) -> httpx2.Response:
    """``/authorize`` followed to the consent page, as a browser signed in to the inbox."""
    r = await http.get(f"{base}/login", params={"token": TOKEN})
    assert r.status_code == 303
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-1",
        "resource": f"{base}/mcp",
        **params,
    }
    r = await http.get(f"{base}/authorize", params=query)
    assert r.status_code == 302, r.text
    return await http.get(r.headers["location"])


async def authorize(
    http: httpx2.AsyncClient, base: str, client_id: str, redirect: str, challenge: str, **params: str
) -> dict[str, list[str]]:
    """The code flow up to the redirect back: consent allowed; the redirect's query."""
    page = await consent_page(http, base, client_id, redirect, challenge, **params)
    assert page.status_code == 200, page.text
    form = {"csrf": hidden(page.text, "csrf"), "request": hidden(page.text, "request"), "decision": "allow"}
    r = await http.post(f"{base}/oauth/consent", data=form)
    assert r.status_code == 303, r.text
    location = r.headers["location"]
    assert location.startswith(redirect + "?")
    return parse_qs(urlsplit(location).query)


async def tokens(http: httpx2.AsyncClient, base: str, **form: str) -> httpx2.Response:
    return await http.post(f"{base}/token", data=form)


async def grant(
    http: httpx2.AsyncClient, base: str, redirect: str = "http://127.0.0.1:9/callback"
) -> dict[str, Any]:
    """A registered client's tokens through the whole flow (registration, consent, code, token)."""
    client = await register(http, base, redirect)
    verifier, challenge = pkce()
    back = await authorize(http, base, client["client_id"], redirect, challenge)
    r = await tokens(
        http,
        base,
        grant_type="authorization_code",
        code=back["code"][0],
        redirect_uri=redirect,
        client_id=client["client_id"],
        code_verifier=verifier,
        resource=f"{base}/mcp",
    )
    assert r.status_code == 200, r.text
    return {**r.json(), "client_id": client["client_id"]}
