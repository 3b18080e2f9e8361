"""Mattermost: the channel's config block and the server's limits. Imports nothing heavy: a config is
validated without websockets."""

from __future__ import annotations

import logging
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.retry import RetryPolicy

log = logging.getLogger("hitl_mcp.channels.mattermost")

INSTALL_HINT = "the mattermost channel needs websockets: pip install 'mcp-hitl[mattermost]'"
MESSAGE_LIMIT = 16383  # a post's message, in characters (Mattermost 5.0+)
PART_LIMIT = 4000  # each part of the agent's text (the action, details, context, payload)
MAX_BODY = 64 * 1024  # an action request; Mattermost's are far smaller
#: reconnecting the WebSocket after a drop
SOCKET_RETRY = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=60.0)
HTTP_TIMEOUT = 15.0

_ID = re.compile(r"[a-z0-9]{26}")


def _url(value: str, example: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as {example}")
    return value.rstrip("/")


class Config(ChannelConfig):
    type: Literal["mattermost"] = "mattermost"
    url: str
    """The Mattermost server: ``https://chat.example.com``."""
    bot_token: SecretStr
    """A bot account's access token (System Console → Integrations → Bot Accounts)."""
    channel_id: str
    """Where requests go: the channel's id (its menu → View Info)."""
    allowed_users: list[str] = Field(default_factory=list)
    """Mattermost user ids that may answer; nobody may when it is empty (fail closed)."""
    actions_url: str | None = None
    """hitl-mcp's address as the Mattermost server reaches it, for buttons (a LAN address works);
    default ``server.public_url``. With neither, answers come by reaction or thread reply only."""

    @field_validator("url")
    @classmethod
    def _server(cls, value: str) -> str:
        return _url(value, "https://chat.example.com")

    @field_validator("actions_url")
    @classmethod
    def _actions(cls, value: str | None) -> str | None:
        return None if value is None else _url(value, "http://10.0.0.5:8765")

    @field_validator("channel_id")
    @classmethod
    def _channel(cls, value: str) -> str:
        if not _ID.fullmatch(value):
            raise ValueError("expected a Mattermost channel id: 26 lowercase letters and digits")
        return value

    @field_validator("allowed_users")
    @classmethod
    def _users(cls, value: list[str]) -> list[str]:
        for user in value:
            if not _ID.fullmatch(user):
                raise ValueError(
                    f"expected Mattermost user ids (26 lowercase letters and digits), got {user!r}"
                )
        return value

    @property
    def answerers(self) -> frozenset[str]:
        return frozenset(self.allowed_users)

    @property
    def websocket_url(self) -> str:
        return "ws" + self.url.removeprefix("http") + "/api/v4/websocket"
