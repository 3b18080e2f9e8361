"""Who the built-in authorization server knows as a client:

- a client that registered itself (RFC 7591 Dynamic Client Registration), kept in the store
  (``grants.py``); revoked, it is unknown from the next request on, and a host registers again
  (Claude does so on ``invalid_client``);
- a client whose ``client_id`` is the https URL of its metadata document (Client ID Metadata
  Documents, the MCP spec's recommended way): the document is fetched (https, at most 5 kB, no
  redirects, within 5 s), must name itself as that ``client_id``, use no client secret, and is
  kept in this process for 5 minutes. Its address must be public unless this server's own
  ``public_url`` is on loopback (a local install), so that a request cannot make the server read
  from the private network.

Either way a client may ask only for ``hitl:ask``, and its redirect URIs are matched exactly.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import ValidationError

from hitl_mcp.core.principal import ASK_SCOPE
from hitl_mcp.kit.net import is_loopback
from hitl_mcp.web.oauth.grants import Grants

log = logging.getLogger("hitl_mcp")

DOCUMENT_MAX_BYTES = 5 * 1024
DOCUMENT_TIMEOUT = 5.0
DOCUMENT_TTL = 300.0


class ClientDocumentRefused(Exception):
    """A client metadata document that cannot be used; the message says why (no secret in it)."""


def is_document_id(client_id: str) -> bool:
    parts = urlsplit(client_id)
    return parts.scheme == "https" and bool(parts.hostname) and parts.path not in ("", "/")


class Clients:
    def __init__(self, grants: Grants, public_url: str, documents: bool) -> None:
        self.grants = grants
        self.documents = documents
        self.private_ok = is_loopback(urlsplit(public_url).hostname or "")
        self._cache: dict[str, tuple[float, OAuthClientInformationFull]] = {}

    async def get(self, client_id: str) -> OAuthClientInformationFull | None:
        if self.documents and is_document_id(client_id):
            try:
                return await self.document(client_id)
            except ClientDocumentRefused as exc:
                log.warning("hitl-mcp: OAuth client %s refused: %s", client_id, exc)
                return None
        data = await self.grants.client(client_id)
        if data is None:
            return None
        data = {k: v for k, v in data.items() if k != "secret_digest"}
        return OAuthClientInformationFull.model_validate(data)

    async def secret_digest(self, client_id: str) -> str | None:
        data = await self.grants.client(client_id)
        return None if data is None else data.get("secret_digest")

    async def register(self, info: OAuthClientInformationFull) -> None:
        metadata = info.model_dump(mode="json", exclude_none=True)
        await self.grants.add_client(info.client_id, metadata, info.client_secret)

    async def document(self, url: str) -> OAuthClientInformationFull:
        cached = self._cache.get(url)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        info = await self._fetch(url)
        self._cache[url] = (time.monotonic() + DOCUMENT_TTL, info)
        return info

    async def _fetch(self, url: str) -> OAuthClientInformationFull:
        host = urlsplit(url).hostname or ""
        if not self.private_ok and not await _public(host):
            raise ClientDocumentRefused(f"{host} is not a public address")
        try:
            async with httpx2.AsyncClient(timeout=DOCUMENT_TIMEOUT, follow_redirects=False) as http:
                async with http.stream("GET", url, headers={"Accept": "application/json"}) as r:
                    if r.status_code != 200:
                        raise ClientDocumentRefused(f"its document answered {r.status_code}")
                    body = b""
                    async for chunk in r.aiter_bytes():
                        body += chunk
                        if len(body) > DOCUMENT_MAX_BYTES:
                            raise ClientDocumentRefused(
                                f"its document is larger than {DOCUMENT_MAX_BYTES} bytes"
                            )
        except httpx2.HTTPError as exc:
            raise ClientDocumentRefused(f"its document could not be fetched ({type(exc).__name__})") from None
        try:
            doc: Any = json.loads(body)
        except ValueError:
            raise ClientDocumentRefused("its document is not JSON") from None
        if not isinstance(doc, dict) or doc.get("client_id") != url:
            raise ClientDocumentRefused("its document does not name this URL as its client_id")
        if "client_secret" in doc or doc.get("token_endpoint_auth_method", "none") != "none":
            raise ClientDocumentRefused("a metadata document client uses no client secret")
        doc = {**doc, "token_endpoint_auth_method": "none", "scope": ASK_SCOPE}
        try:
            info = OAuthClientInformationFull.model_validate(doc)
        except ValidationError:
            raise ClientDocumentRefused("its document is not valid client metadata") from None
        if not info.redirect_uris:
            raise ClientDocumentRefused("its document names no redirect_uris")
        return info


async def _public(host: str) -> bool:
    """Whether every address ``host`` resolves to is a global one."""
    try:
        infos = await anyio.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_global for a in addresses)
