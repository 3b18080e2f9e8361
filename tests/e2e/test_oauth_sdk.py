"""The ``mcp`` SDK's own OAuth client (``OAuthClientProvider``) against the built-in authorization
server, end to end: from a bare 401 it discovers the resource and the authorization server, registers
(Dynamic Client Registration, or a Client ID Metadata Document served over https), sends the person
to the consent page, which headless Chromium signs in to and allows, exchanges the code (PKCE), calls
the tools, refreshes, and after revocation is refused with 401."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from hitl_mcp.core.principal import of_owner
from tests.conftest import TOKEN
from tests.support.mail import Certs
from tests.support.oauth import Callback, MemoryTokens, Served, callback_server, serve_oauth
from tests.support.serve import serving
from tests.web.test_inbox_access import AXE, AXE_RUN

CHROMIUM = "/usr/bin/chromium"
#: how long closing a browser context may take before the test goes on without it
CLOSE_SECONDS = 10
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-quic",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium); these tests always run in CI",
    ),
]

playwright_api = pytest.importorskip("playwright.async_api")
from playwright.async_api import Browser, async_playwright  # noqa: E402


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


class Person:
    """The operator at a browser: signs in to the inbox when asked and allows the app."""

    def __init__(self, browser: Browser, callback: Callback) -> None:
        self.browser = browser
        self.callback = callback
        self.consents: list[str] = []
        self.violations: list[str] = []
        """What axe-core found on the sign-in and consent pages (when tests/ts has it)."""

    async def redirect(self, url: str) -> None:
        """The SDK's ``redirect_handler``: the authorization URL, opened in Chromium."""
        ctx = await self.browser.new_context()
        try:
            if AXE.exists():
                await ctx.add_init_script(path=str(AXE))
            page = await ctx.new_page()
            await page.goto(url)
            await self.axe(page, "sign-in for consent")
            await page.fill("#signin-token", TOKEN)  # signed out: the sign-in page comes first
            await page.click("form.signin-form button[type=submit]")
            await page.wait_for_selector("form.consent-form")
            await self.axe(page, "consent")
            self.consents.append(await page.inner_text(".consent-client"))
            seen = len(self.callback.answers)
            await page.click("button[value=allow]")
            await self.callback.next(seen)
            # the redirect's page loaded before its context closes: closed mid-navigation, Chromium
            # sometimes never answered the close under load, and the run lost its worker at 180 s
            await page.wait_for_load_state()
        finally:
            with anyio.move_on_after(CLOSE_SECONDS):  # a context that does not close is left open
                await ctx.close()

    async def axe(self, page: Any, label: str) -> None:
        if AXE.exists():
            self.violations += await page.evaluate(AXE_RUN, label)

    async def code(self) -> AuthorizationCodeResult:
        """The SDK's ``callback_handler``: what came back to the redirect URI."""
        answer = self.callback.answers[-1]
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))


@contextlib.asynccontextmanager
async def oauth_client(
    served: Served, person: Person, storage: MemoryTokens, metadata_url: str | None = None
) -> AsyncIterator[tuple[Client, OAuthClientProvider]]:
    provider = OAuthClientProvider(
        server_url=served.mcp,
        client_metadata=OAuthClientMetadata(
            client_name="SDK test client",
            redirect_uris=[person.callback.url],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.code,
        client_metadata_url=metadata_url,
    )
    async with create_mcp_http_client(auth=provider) as http:
        async with Client(streamable_http_client(served.mcp, http_client=http)) as client:
            yield client, provider


async def asked_by(served: Served) -> Any:
    broker = await served.runtime.broker()
    return [of_owner(r.owner) for r in await broker.store.list()]


async def refresh_and_revoke(
    served: Served, client: Client, provider: OAuthClientProvider, storage: MemoryTokens
) -> None:
    """Refresh (the SDK refreshes a token it holds as expired), then revoke: the token is refused."""
    before = storage.tokens
    assert before is not None
    provider.context.token_expiry_time = time.time() - 1
    await client.call_tool("notify_user", {"message": "after refresh"})
    after = storage.tokens
    assert after is not None and after.access_token != before.access_token
    assert after.refresh_token != before.refresh_token
    assert provider.context.client_info is not None
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            f"{served.url}/revoke",
            data={"token": after.access_token, "client_id": provider.context.client_info.client_id},
        )
        assert r.status_code == 200
        r = await http.post(
            served.mcp,
            json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
            headers={
                "Authorization": f"Bearer {after.access_token}",
                "Accept": "application/json, text/event-stream",
            },
        )
        assert r.status_code == 401
        r = await http.post(
            f"{served.url}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": after.refresh_token or "",
                "client_id": provider.context.client_info.client_id,
            },
        )
        assert r.json()["error"] == "invalid_grant"


async def test_the_sdk_client_registers_gets_consent_in_chromium_calls_refreshes_and_is_revoked(
    state_dir: Path, browser: Browser
) -> None:
    async with serve_oauth(state_dir) as served, callback_server() as callback:
        person = Person(browser, callback)
        storage = MemoryTokens()
        async with oauth_client(served, person, storage) as (client, provider):
            result = await client.call_tool("notify_user", {"message": "hello over OAuth"})
            assert not result.is_error
            assert person.consents == ["SDK test client"]
            assert person.violations == []
            assert storage.client is not None and storage.client.client_id  # registered (DCR)
            (principal,) = await asked_by(served)
            assert principal.kind == "oauth" and storage.client.client_id in principal.name
            await refresh_and_revoke(served, client, provider, storage)
            assert person.consents == ["SDK test client"]  # the refresh needed no person


async def test_the_sdk_client_as_a_metadata_document_needs_no_registration(
    state_dir: Path, browser: Browser, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca_file))  # the server trusts the test CA
    document: dict[str, Any] = {}

    async def serve_document(_: Any) -> JSONResponse:
        return JSONResponse(document)

    app = Starlette(routes=[Route("/client.json", serve_document)])
    options = {"ssl_certfile": str(certs.server_pem)}
    async with (
        serve_oauth(state_dir) as served,
        callback_server() as callback,
        serving(app, **options) as base,
    ):
        url = base.replace("http://", "https://") + "/client.json"
        document.update(
            client_id=url,
            client_name="SDK metadata document client",
            redirect_uris=[callback.url],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        person = Person(browser, callback)
        storage = MemoryTokens()
        async with oauth_client(served, person, storage, metadata_url=url) as (client, provider):
            result = await client.call_tool("notify_user", {"message": "hello from a document"})
            assert not result.is_error
            assert person.consents == ["SDK metadata document client"]
            assert storage.client is not None and storage.client.client_id == url
            broker = await served.runtime.broker()
            assert [r for r in await broker.store.audit() if r.event == "oauth_client_added"] == []
            (principal,) = await asked_by(served)
            assert f"|{url}|" in principal.name
            await refresh_and_revoke(served, client, provider, storage)
