"""Mattermost: REST API v4 calls (httpx2, the server's own HTTP client), each failure turned into a
``DeliveryError`` that says what to fix and never holds the token."""

from __future__ import annotations

from typing import Any

import httpx2

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.mattermost.config import HTTP_TIMEOUT, Config
from hitl_mcp.core.retry import retry_after


def new_client(config: Config) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        base_url=f"{config.url}/api/v4",
        headers={"Authorization": f"Bearer {config.bot_token.get_secret_value()}"},
        timeout=HTTP_TIMEOUT,
    )


async def call(
    client: httpx2.AsyncClient, method: str, path: str, config: Config, json: Any = None, where: str = ""
) -> Any:
    """One REST call; its JSON answer, or ``DeliveryError``."""
    what = f"{method} {path.split('?')[0]}"
    try:
        response = await client.request(method, path, json=json)
    except httpx2.HTTPError as exc:
        raise DeliveryError(
            f"{what}: could not reach Mattermost at {config.url} ({type(exc).__name__})"
        ) from None
    status = response.status_code
    if status < 300:
        return response.json() if response.content else None
    try:
        said = str(response.json().get("message") or status)
    except ValueError:
        said = str(status)
    at = f" in channel {where}" if where else ""
    if status == 429:
        raise DeliveryError(
            f"{what}: rate limited by Mattermost", retry_after=retry_after(dict(response.headers)) or 5.0
        )
    if status == 401:
        raise DeliveryError(f"{what}: Mattermost refused the bot_token ({said})", permanent=True)
    if status == 403:
        raise DeliveryError(f"{what}{at}: the bot lacks a permission here ({said})", permanent=True)
    if status == 404:
        raise DeliveryError(f"{what}{at}: not found ({said})", permanent=True)
    if status < 500:
        raise DeliveryError(f"{what}{at}: Mattermost refused it ({status}: {said})", permanent=True)
    raise DeliveryError(f"{what}{at}: Mattermost failed ({status}: {said})")
