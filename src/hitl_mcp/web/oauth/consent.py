"""The consent page of the built-in authorization server: ``GET /oauth/consent?request=…`` shows,
to a signed-in inbox session (else the sign-in page first, which comes back here), which client asks,
where it will send the answer and what it may then do; ``POST /oauth/consent`` allows or refuses.

The post needs the session's CSRF token (a page on another site cannot make the browser allow a
client), and the request it answers is the signed one the authorization endpoint made (its client,
redirect URI, PKCE challenge and state cannot be changed on the way). Allowed: a one-time code,
kept hashed and audited (``oauth_code_added``), goes back to the client's redirect URI with the
``state`` and the issuer (RFC 9207); refused: ``error=access_denied``.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

from starlette.requests import Request as HttpRequest
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.core.principal import ASK_SCOPE, OPERATOR
from hitl_mcp.web.deps import page_context, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.oauth.provider import CONSENT_PATH, BuiltinProvider, Pending
from hitl_mcp.web.pagekit import PAGE_HEADERS, read_form, render
from hitl_mcp.web.signin import NO_TRACE, signin_page

SCOPE_TEXT = {ASK_SCOPE: "ask you questions, ask for approvals and notify you, through this server"}
STALE = "This request for access is not valid or has expired. Start again from the app that asked."


class _HasProvider(Protocol):
    """What the consent pages need of the app's ``OAuth`` (``web/oauth/__init__.py``)."""

    provider: BuiltinProvider | None


def _oauth(http: HttpRequest) -> _HasProvider:
    oauth: _HasProvider = http.app.state.oauth
    return oauth


def _headers(redirect_uri: str) -> dict[str, str]:
    """The page's headers: the form may end in a redirect to the client (CSP ``form-action``)."""
    parts = urlsplit(redirect_uri)
    target = f"{parts.scheme}://{parts.netloc}" if parts.netloc else f"{parts.scheme}:"
    csp = PAGE_HEADERS["Content-Security-Policy"].replace(
        "form-action 'self'", f"form-action 'self' {target}"
    )
    return {**PAGE_HEADERS, "Content-Security-Policy": csp}


async def show(http: HttpRequest) -> Response:
    oauth = _oauth(http)
    assert oauth.provider is not None
    deps = web(http)
    sealed = http.query_params.get("request")
    pending = Pending.open(oauth.provider.signer, sealed)
    if pending is None:
        raise Problem(400, STALE, title="Request for access not valid")
    if await deps.sessions.read(http) is None:
        return signin_page(http, deps.sessions, then=f"{CONSENT_PATH}?{http.url.query}", consent=True)
    client = await oauth.provider.get_client(pending.client_id)
    if client is None:
        raise Problem(400, "This app is not registered here (any more). Start again from the app.")
    response = render(
        "consent.html",
        200,
        **await page_context(http, "consent"),
        client_name=client.client_name or "An app that did not give its name",
        client_id=client.client_id,
        client_uri=str(client.client_uri) if client.client_uri else None,
        redirect_uri=pending.redirect_uri,
        scopes=[(s, SCOPE_TEXT.get(s, s)) for s in pending.scopes],
        resource=pending.resource,
        sealed=sealed,
    )
    response.headers.update(_headers(pending.redirect_uri))
    return response


async def answer(http: HttpRequest) -> Response:
    oauth = _oauth(http)
    assert oauth.provider is not None
    deps = web(http)
    form, refused = await read_form(http)
    if refused is not None or form is None:
        status, message = refused or (400, "The form could not be read.")
        raise Problem(status, message, title="Request for access")
    access = await deps.sessions.read(http)
    if access is None:
        return signin_page(http, deps.sessions, consent=True)
    if not access.csrf_ok(form.get("csrf")):
        raise Problem(
            403,
            "This answer did not come from your inbox's consent page. Nothing was allowed.",
            title="Request for access refused",
        )
    pending = Pending.open(oauth.provider.signer, form.get("request"))
    if pending is None:
        raise Problem(400, STALE, title="Request for access not valid")
    issuer = oauth.provider.issuer
    if form.get("decision") != "allow":
        target = pending.answer(issuer, error="access_denied", error_description="The person refused.")
        return RedirectResponse(target, status_code=303, headers=NO_TRACE)
    code = await oauth.provider.grants.add_code(
        {
            "client_id": pending.client_id,
            "subject": OPERATOR,
            "scopes": pending.scopes,
            "resource": pending.resource,
            "redirect_uri": pending.redirect_uri,
            "explicit": pending.explicit,
            "code_challenge": pending.code_challenge,
        },
        "operator (inbox)",
    )
    return RedirectResponse(pending.answer(issuer, code=code), status_code=303, headers=NO_TRACE)


routes: list[BaseRoute] = [
    Route(CONSENT_PATH, show, methods=["GET"]),
    Route(CONSENT_PATH, answer, methods=["POST"]),
]
