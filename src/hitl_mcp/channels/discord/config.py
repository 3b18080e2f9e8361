"""Discord: the channel's config block and the platform's limits. Imports nothing heavy: a config is
validated without discord.py."""

from __future__ import annotations

import logging
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.retry import RetryPolicy

log = logging.getLogger("hitl_mcp.channels.discord")

DEFAULT_API = "https://discord.com"
INSTALL_HINT = "the discord channel needs discord.py: pip install 'mcp-hitl[discord]'"
#: Discord's limits
CONTENT_LIMIT = 2000  # a message's content, in characters
CUSTOM_ID_LIMIT = 100  # a component's custom_id
LABEL_LIMIT = 80  # a button's label
MODAL_TITLE_LIMIT = 45
ANSWER_LIMIT = 4000  # a modal's text input
BUTTONS_PER_ROW, ROWS = 5, 5
#: reconnecting the gateway after discord.py gave up on it
GATEWAY_RETRY = RetryPolicy(initial_interval=2.0, backoff_coefficient=2.0, maximum_interval=120.0)
#: seconds one REST call may take, waiting for its turn in a rate-limit bucket included
HTTP_TIMEOUT = 30.0

# a bot token: three dot-separated base64url parts (the bot's id, a timestamp, an HMAC)
_TOKEN = re.compile(r"[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}")


def _snowflake(value: int, what: str) -> int:
    if value <= 0 or value >= 1 << 64:
        raise ValueError(f"expected a Discord {what} id (a snowflake, such as 1234567890123456789)")
    return value


class Config(ChannelConfig):
    type: Literal["discord"] = "discord"
    bot_token: SecretStr
    """The bot's token (Developer Portal → your application → Bot → Reset Token)."""
    channel_id: int
    """Where requests go: a text channel's id (Developer Mode → right-click the channel → Copy ID)."""
    allowed_users: list[int] = Field(default_factory=list)
    """Discord user ids that may press the buttons; nobody may when it is empty (fail closed)."""
    api_base: str = DEFAULT_API
    """Discord's address: set only for a test stand-in (REST under ``<api_base>/api/v10``)."""

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value().strip()
        if token.lower().startswith("bot "):
            token = token[4:].strip()
        if not _TOKEN.fullmatch(token):
            raise ValueError("expected the bot token the Developer Portal gave (three parts joined by dots)")
        return SecretStr(token)

    @field_validator("channel_id")
    @classmethod
    def _channel_id(cls, value: int) -> int:
        return _snowflake(value, "channel")

    @field_validator("allowed_users")
    @classmethod
    def _allowed_users(cls, value: list[int]) -> list[int]:
        return [_snowflake(user, "user") for user in value]

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://discord.com")
        return value.rstrip("/")

    @property
    def answerers(self) -> frozenset[str]:
        return frozenset(str(user) for user in self.allowed_users)
