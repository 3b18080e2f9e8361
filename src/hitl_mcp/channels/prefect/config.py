"""Prefect: the channel's config block (where Prefect's API is, and its credential)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.durations import bounded


class Config(ChannelConfig):
    type: Literal["prefect"] = "prefect"
    api_url: str
    """Prefect's API, as ``PREFECT_API_URL`` gives it: ``http://127.0.0.1:4200/api`` for ``prefect server
    start``, ``https://api.prefect.cloud/api/accounts/<id>/workspaces/<id>`` for Prefect Cloud."""
    api_key: SecretStr | None = None
    """Prefect Cloud's API key (``PREFECT_API_KEY``), sent as a Bearer token."""
    auth_string: SecretStr | None = None
    """A self-hosted server's ``PREFECT_API_AUTH_STRING`` (``user:password``), sent as basic auth."""
    timeout: Annotated[float, bounded(0.1, 25)] = 10.0
    """Seconds to wait for Prefect's answer; a timeout is retried."""
    takes_digest: ClassVar[bool] = False

    @field_validator("api_url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected Prefect's API URL, such as http://127.0.0.1:4200/api")
        return value.rstrip("/")
