"""OAuth 2.1 on ``/mcp`` with the built-in authorization server (``server.oauth.issuer: builtin``),
walked with a plain HTTP client against the real app under uvicorn: discovery from a bare 401, the
metadata, registration, consent, code, token, tool calls as an ``oauth`` principal, refresh with
rotation, revocation; and every refusal the MCP authorization spec asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.core.principal import of_owner, owner_label
from tests.conftest import bearer
from tests.support.oauth import (
    Served,
    authorize,
    consent_page,
    grant,
    hidden,
    pkce,
    register,
    serve_oauth,
    tokens,
)

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "claude-ai", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
REDIRECT = "http://127.0.0.1:9/callback"


async def mcp_status(http: httpx2.AsyncClient, served: Served, token: str | None) -> httpx2.Response:
    headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
    return await http.post(served.mcp, json=INITIALIZE, headers=headers)


async def events(served: Served, prefix: str = "oauth_") -> list[tuple[str, str, dict[str, Any]]]:
    broker = await served.runtime.broker()
    return [(r.event, r.actor, r.data) for r in await broker.store.audit() if r.event.startswith(prefix)]


# ------------------------------------------------------------------------------ discovery


async def test_a_bare_401_names_the_metadata_that_leads_to_the_authorization_server(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        r = await mcp_status(http, served, None)
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        prm = f"{served.url}/.well-known/oauth-protected-resource/mcp"
        assert challenge == f'Bearer resource_metadata="{prm}", scope="hitl:ask"'  # no error: no token sent
        r = await mcp_status(http, served, "hitl_at_not-issued")
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith('Bearer error="invalid_token", ')
        assert f'resource_metadata="{prm}"' in r.headers["www-authenticate"]

        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            meta = (await http.get(served.url + path)).json()
            assert meta["resource"] == served.mcp
            assert meta["authorization_servers"] == [served.url]
            assert meta["scopes_supported"] == ["hitl:ask"]
        meta = (await http.get(f"{served.url}/.well-known/oauth-authorization-server")).json()
        assert meta["issuer"] == served.url  # exactly: no trailing slash (RFC 8414 §3.3)
        assert meta["authorization_endpoint"] == f"{served.url}/authorize"
        assert meta["token_endpoint"] == f"{served.url}/token"
        assert meta["registration_endpoint"] == f"{served.url}/register"
        assert meta["revocation_endpoint"] == f"{served.url}/revoke"
        assert meta["code_challenge_methods_supported"] == ["S256"]
        assert meta["response_types_supported"] == ["code"]
        assert meta["grant_types_supported"] == ["authorization_code", "refresh_token"]
        assert meta["client_id_metadata_document_supported"] is True
        assert meta["authorization_response_iss_parameter_supported"] is True
        assert "none" in meta["token_endpoint_auth_methods_supported"]


# ------------------------------------------------------------------------------ the flow


async def test_a_consented_token_asks_as_an_oauth_principal_and_every_grant_is_audited(
    state_dir: Path,
) -> None:
    extra = "people:\n  ana: {oauth: operator}\n"
    async with serve_oauth(state_dir, extra=extra) as served, httpx2.AsyncClient() as http:
        issued = await grant(http, served.url, REDIRECT)
        assert issued["token_type"] == "Bearer" and issued["scope"] == "hitl:ask"
        assert issued["expires_in"] == 3600
        host = Implementation(name="claude-ai", version="1")
        async with Client(
            bearer(served.mcp, issued["access_token"]), mode="legacy", client_info=host
        ) as client:
            result = await client.call_tool("notify_user", {"message": "hello"})
        broker = await served.runtime.broker()
        (request,) = await broker.store.list()
        principal = of_owner(request.owner)
        assert principal.kind == "oauth"
        assert principal.name == f"ana|operator|{issued['client_id']}|{served.url}"
        assert owner_label(request.owner, "claude-ai") == "claude-ai (ana via OAuth)"
        (created,) = [r for r in await broker.store.audit(request.id) if r.event == "created"]
        assert (created.actor, created.data["owner"]) == ("claude-ai", request.owner)  # who asked, audited
        assert result.structured_content is not None
        kinds = [(event, actor) for event, actor, _ in await events(served)]
        assert kinds == [
            ("oauth_client_added", "oauth registration"),
            ("oauth_code_added", "operator (inbox)"),
            ("oauth_code_revoked", "oauth client test app"),
            ("oauth_access_added", "oauth client test app"),
            ("oauth_refresh_added", "oauth client test app"),
        ]
        kept = str(await events(served))
        assert issued["access_token"] not in kept and issued["refresh_token"] not in kept


async def test_refresh_rotates_both_tokens_and_revocation_ends_the_grant(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        first = await grant(http, served.url, REDIRECT)
        r = await tokens(
            http,
            served.url,
            grant_type="refresh_token",
            refresh_token=first["refresh_token"],
            client_id=first["client_id"],
        )
        assert r.status_code == 200, r.text
        second = r.json()
        assert second["access_token"] != first["access_token"]
        assert second["refresh_token"] != first["refresh_token"]
        assert (await mcp_status(http, served, first["access_token"])).status_code == 401  # rotated away
        assert (await mcp_status(http, served, second["access_token"])).status_code == 200
        # a refresh token used once is refused (RFC 9700 rotation)
        r = await tokens(
            http,
            served.url,
            grant_type="refresh_token",
            refresh_token=first["refresh_token"],
            client_id=first["client_id"],
        )
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
        # revoking the access token (RFC 7009) ends the refresh token too
        r = await http.post(
            f"{served.url}/revoke", data={"token": second["access_token"], "client_id": first["client_id"]}
        )
        assert r.status_code == 200
        assert (await mcp_status(http, served, second["access_token"])).status_code == 401
        r = await tokens(
            http,
            served.url,
            grant_type="refresh_token",
            refresh_token=second["refresh_token"],
            client_id=first["client_id"],
        )
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
        revoked = [e for e, _, _ in await events(served) if e.endswith("_revoked")]
        assert revoked.count("oauth_access_revoked") == 2 and revoked.count("oauth_refresh_revoked") == 2


# ------------------------------------------------------------------------------ refusals


async def test_no_token_an_expired_one_or_one_for_another_resource_is_refused(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        assert (await mcp_status(http, served, None)).status_code == 401
        grants = served.oauth.provider.grants
        grants.access_ttl = -1.0  # issued already expired
        expired = await grants.issue("c", "operator", ["hitl:ask"], served.mcp, "test")
        grants.access_ttl = 3600.0
        elsewhere = await grants.issue("c", "operator", ["hitl:ask"], "https://other.example.com/mcp", "test")
        narrow = await grants.issue("c", "operator", [], served.mcp, "test")
        fine = await grants.issue("c", "operator", ["hitl:ask"], served.mcp, "test")
        assert (await mcp_status(http, served, expired.access_token)).status_code == 401
        assert (await mcp_status(http, served, elsewhere.access_token)).status_code == 401
        r = await mcp_status(http, served, narrow.access_token)
        assert r.status_code == 403
        assert r.headers["www-authenticate"].startswith('Bearer error="insufficient_scope"')
        assert 'scope="hitl:ask"' in r.headers["www-authenticate"]
        assert (await mcp_status(http, served, fine.access_token)).status_code == 200


async def test_a_redirect_uri_one_character_off_is_refused_without_redirecting(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        client = await register(http, served.url, REDIRECT)
        _, challenge = pkce()
        for other in (REDIRECT + "s", REDIRECT[:-1], REDIRECT.replace("127.0.0.1:9", "127.0.0.1:8")):
            r = await http.get(
                f"{served.url}/authorize",
                params={
                    "response_type": "code",
                    "client_id": client["client_id"],
                    "redirect_uri": other,
                    "code_challenge": challenge,
                    "code_challenge_method": "S256",
                    "state": "s",
                },
            )
            assert r.status_code == 400, other  # never a redirect to an address it did not register
            assert r.json()["error"] == "invalid_request"
            assert "location" not in r.headers


async def test_a_consent_post_without_its_csrf_token_allows_nothing(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        client = await register(http, served.url, REDIRECT)
        _, challenge = pkce()
        page = await consent_page(http, served.url, client["client_id"], REDIRECT, challenge)
        assert page.status_code == 200
        assert "test app" in page.text and REDIRECT in page.text
        assert "form-action 'self' http://127.0.0.1:9" in page.headers["content-security-policy"]
        sealed = hidden(page.text, "request")
        for csrf in (None, "0" * 64):
            form = {"request": sealed, "decision": "allow", **({"csrf": csrf} if csrf else {})}
            r = await http.post(f"{served.url}/oauth/consent", data=form)
            assert r.status_code == 403, r.text
            assert "location" not in r.headers
        assert [e for e, _, _ in await events(served) if e == "oauth_code_added"] == []
        # a changed request (another redirect) is not the one the server signed
        form = {"request": sealed[:-2] + "AA", "decision": "allow", "csrf": hidden(page.text, "csrf")}
        assert (await http.post(f"{served.url}/oauth/consent", data=form)).status_code == 400


async def test_signed_out_the_consent_page_asks_to_sign_in_first(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        client = await register(http, served.url, REDIRECT)
        _, challenge = pkce()
        r = await http.get(
            f"{served.url}/authorize",
            params={
                "response_type": "code",
                "client_id": client["client_id"],
                "redirect_uri": REDIRECT,
                "code_challenge": challenge,
                "state": "s",
            },
        )
        r = await http.get(r.headers["location"])
        assert r.status_code == 401
        assert "An app asks for access to this server" in r.text
        assert 'name="next" value="/oauth/consent?request=' in r.text


async def test_the_code_is_bound_to_its_verifier_its_client_and_one_use(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        client = await register(http, served.url, REDIRECT)
        other = await register(http, served.url, REDIRECT)
        verifier, challenge = pkce()
        code = (await authorize(http, served.url, client["client_id"], REDIRECT, challenge))["code"][0]
        exchange = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT}
        r = await tokens(http, served.url, **exchange, client_id=client["client_id"], code_verifier="x" * 50)
        assert r.json()["error"] == "invalid_grant"  # the wrong verifier (PKCE)
        r = await tokens(http, served.url, **exchange, client_id=other["client_id"], code_verifier=verifier)
        assert r.json()["error"] == "invalid_grant"  # another client
        r = await tokens(http, served.url, **exchange, client_id=client["client_id"], code_verifier=verifier)
        assert r.status_code == 200
        r = await tokens(http, served.url, **exchange, client_id=client["client_id"], code_verifier=verifier)
        assert r.json()["error"] == "invalid_grant"  # once only
        # PKCE plain is not offered
        r = await http.get(
            f"{served.url}/authorize",
            params={
                "response_type": "code",
                "client_id": client["client_id"],
                "redirect_uri": REDIRECT,
                "code_challenge": challenge,
                "code_challenge_method": "plain",
                "state": "s",
            },
        )
        assert r.status_code == 302 and "error=invalid_request" in r.headers["location"]
        # a token for another resource is not issued at all (RFC 8707)
        r = await http.get(
            f"{served.url}/authorize",
            params={
                "response_type": "code",
                "client_id": client["client_id"],
                "redirect_uri": REDIRECT,
                "code_challenge": challenge,
                "state": "s",
                "resource": "https://other.example.com/mcp",
            },
        )
        assert r.status_code == 302 and "error=invalid_target" in r.headers["location"]


async def test_a_refusal_goes_back_to_the_client_as_access_denied(state_dir: Path) -> None:
    async with serve_oauth(state_dir) as served, httpx2.AsyncClient() as http:
        client = await register(http, served.url, REDIRECT)
        _, challenge = pkce()
        page = await consent_page(http, served.url, client["client_id"], REDIRECT, challenge)
        form = {
            "csrf": hidden(page.text, "csrf"),
            "request": hidden(page.text, "request"),
            "decision": "deny",
        }
        r = await http.post(f"{served.url}/oauth/consent", data=form)
        assert r.status_code == 303
        assert r.headers["location"].startswith(f"{REDIRECT}?error=access_denied")
        assert "state=st-1" in r.headers["location"] and "iss=" in r.headers["location"]
