"""The built-in authorization server's routes: the ``mcp`` SDK's own handlers (``/authorize``,
``/token``, ``/register``, ``/revoke``, RFC 8414 metadata at ``/.well-known/oauth-authorization-server``)
around ``provider.py``, and the consent page (``consent.py``).

Two things differ from the SDK's defaults: a client's secret is checked against its SHA-256 (it is
never kept), and the metadata also says that clients may be metadata documents, that public clients
(``none``) are welcome and that the authorization response names its issuer (RFC 9207).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any
from urllib.parse import unquote

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.routes import (
    AUTHORIZATION_PATH,
    REGISTRATION_PATH,
    REVOCATION_PATH,
    TOKEN_PATH,
    build_metadata,
    cors_middleware,
)
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.core.principal import token_digest
from hitl_mcp.web.oauth.provider import SCOPES, BuiltinProvider

METADATA_PATH = "/.well-known/oauth-authorization-server"


class HashedSecrets(ClientAuthenticator):
    """The SDK's client authentication (``client_secret_basic``, ``client_secret_post``, ``none``),
    with the secret compared by its digest."""

    def __init__(self, provider: BuiltinProvider) -> None:
        super().__init__(provider)
        self.builtin = provider

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        client_id = form.get("client_id")
        header = request.headers.get("authorization", "")
        if not client_id and header.startswith("Basic "):
            client_id = _basic(header)[0]
        if not client_id or not isinstance(client_id, str):
            raise AuthenticationError("Missing client_id")
        client = await self.builtin.get_client(client_id)
        if client is None:
            raise AuthenticationError("Invalid client_id")
        method = client.token_endpoint_auth_method or "client_secret_post"
        if method == "none":
            return client
        sent: str | None
        if method == "client_secret_basic":
            basic_id, sent = _basic(header)
            if basic_id != client_id:
                raise AuthenticationError("Client ID mismatch in Basic auth")
        else:
            value = form.get("client_secret")
            sent = value if isinstance(value, str) else None
        kept = await self.builtin.clients.secret_digest(client_id)
        if not sent or not kept or not hmac.compare_digest(token_digest(sent), kept):
            raise AuthenticationError("Invalid client_secret")
        return client


class Revocation:
    """RFC 7009: the client authenticated as at the token endpoint (a public client sends only its
    ``client_id``, which the SDK's handler does not allow); either token of a grant ends both; an
    unknown token, or another client's, is answered 200 all the same."""

    def __init__(self, provider: BuiltinProvider, authenticator: HashedSecrets) -> None:
        self.provider = provider
        self.authenticator = authenticator

    async def handle(self, request: Request) -> Response:
        try:
            client = await self.authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            return JSONResponse(
                {"error": "invalid_client", "error_description": exc.message}, status_code=401
            )
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str) or not token:
            return JSONResponse({"error": "invalid_request", "error_description": "token is missing"}, 400)
        found = await self.provider.load_access_token(token) or await self.provider.load_refresh_token(
            client, token
        )
        if found is not None and found.client_id == client.client_id:
            await self.provider.revoke_token(found)
        return Response(status_code=200, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


def _basic(header: str) -> tuple[str, str]:
    if not header.startswith("Basic "):
        raise AuthenticationError("Missing or invalid Basic authentication in Authorization header")
    try:
        decoded = base64.b64decode(header[6:]).decode()
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise AuthenticationError("Invalid Basic authentication header") from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise AuthenticationError("Invalid Basic authentication header")
    return unquote(client_id), unquote(secret)


def metadata(issuer: str, registration: bool, documents: bool) -> dict[str, Any]:
    meta = build_metadata(
        AnyHttpUrl(issuer),
        None,
        ClientRegistrationOptions(enabled=registration, valid_scopes=SCOPES, default_scopes=SCOPES),
        RevocationOptions(enabled=True),
    )
    meta.issuer = AnyHttpUrl(issuer)
    meta.token_endpoint_auth_methods_supported = ["none", "client_secret_post", "client_secret_basic"]
    meta.revocation_endpoint_auth_methods_supported = meta.token_endpoint_auth_methods_supported
    meta.client_id_metadata_document_supported = documents
    meta.authorization_response_iss_parameter_supported = True
    dumped: dict[str, Any] = meta.model_dump(mode="json", exclude_none=True)
    dumped["issuer"] = issuer  # exactly as configured: RFC 8414 compares it as a string
    return dumped


def server_routes(provider: BuiltinProvider, registration: bool, documents: bool) -> list[BaseRoute]:
    authenticator = HashedSecrets(provider)
    described = metadata(provider.issuer, registration, documents)

    async def describe(_: Request) -> JSONResponse:  # the issuer exactly as configured (no "/" added)
        return JSONResponse(described, headers={"Cache-Control": "public, max-age=3600"})

    routes: list[BaseRoute] = [
        Route(METADATA_PATH, cors_middleware(describe, ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"]),
        Route(
            AUTHORIZATION_PATH,
            AuthorizationHandler(provider).handle,
            methods=["GET", "POST"],
        ),
        Route(
            TOKEN_PATH,
            cors_middleware(TokenHandler(provider, authenticator).handle, ["POST", "OPTIONS"]),
            methods=["POST", "OPTIONS"],
        ),
        Route(
            REVOCATION_PATH,
            cors_middleware(Revocation(provider, authenticator).handle, ["POST", "OPTIONS"]),
            methods=["POST", "OPTIONS"],
        ),
    ]
    if registration:
        options = ClientRegistrationOptions(enabled=True, valid_scopes=SCOPES, default_scopes=SCOPES)
        handler = RegistrationHandler(provider, options=options)
        routes.append(
            Route(
                REGISTRATION_PATH,
                cors_middleware(handler.handle, ["POST", "OPTIONS"]),
                methods=["POST", "OPTIONS"],
            )
        )
    return routes
