"""Slack: the channel's config block and its limits."""

from __future__ import annotations

import logging
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator, model_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.retry import RetryPolicy

log = logging.getLogger("hitl_mcp.channels.slack")

DEFAULT_API = "https://slack.com/api/"
#: a 429 asking to wait longer than this is not slept out inside the call: the outbox retries later
MAX_RATE_LIMIT_WAIT = 5.0
RATE_LIMIT_RETRIES = 2
MAX_BODY = 1024 * 1024
SECTION_LIMIT = 3000  # Slack: a section's text
HEADER_LIMIT = 150
BUTTON_LIMIT = 75
#: reconnecting Socket Mode after a transient failure
SOCKET_RETRY = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=60.0)
INSTALL_HINT = "the slack channel needs slack_sdk and aiohttp: pip install 'mcp-hitl[slack]'"

_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_MENTION = re.compile(r"[UWS][A-Z0-9]{2,}|here|channel|everyone")
_RESPONDER = re.compile(r"@.+ \(([UW][A-Z0-9]+)\)")


class Config(ChannelConfig):
    type: Literal["slack"] = "slack"
    bot_token: SecretStr
    """The Bot User OAuth Token, xoxb-…"""
    app_token: SecretStr | None = None
    """An app-level token (xapp-…, scope connections:write): Socket Mode, no public URL needed."""
    signing_secret: SecretStr | None = None
    """HTTP mode (when there is no app_token): verifies Slack's requests to /webhooks/slack/..."""
    channel: str | None = None
    """A channel id (C0123ABCD) to post in; or use ``users``."""
    users: list[str] | None = None
    """User ids (U0123ABCD) to send direct messages to."""
    allowed_users: list[str] | None = None
    """Who may answer. Default for direct messages: ``users``. For a channel it must be set."""
    mention: str | None = None
    """A user id, a user group id (S…), or here / channel, to @-mention in each message."""
    api_base_url: str = DEFAULT_API

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value().startswith("xapp-"):
            raise ValueError("this is an app-level token (xapp-…); bot_token takes the Bot User OAuth Token")
        if not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("app_token")
    @classmethod
    def _app_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xapp-"):
            raise ValueError(
                "expected an app-level token (xapp-…, from Basic Information > App-Level Tokens)"
            )
        return value

    @field_validator("signing_secret")
    @classmethod
    def _signing_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("channel")
    @classmethod
    def _channel(cls, value: str | None) -> str | None:
        if value is not None and not _CHANNEL_ID.fullmatch(value):
            raise ValueError(
                f"expected a channel id such as C0123ABCD, got {value[:40]!r} (in Slack, open the "
                "channel's details: the id is at the bottom)"
            )
        return value

    @field_validator("users", "allowed_users")
    @classmethod
    def _user_ids(cls, value: list[str] | None) -> list[str] | None:
        for user in value or []:
            if not _USER_ID.fullmatch(user):
                raise ValueError(
                    f"expected user ids such as U0123ABCD, got {user[:40]!r} (in Slack: a person's "
                    "profile > ⋮ > Copy member ID)"
                )
        return value

    @field_validator("mention")
    @classmethod
    def _mention(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.removeprefix("@")
        if not _MENTION.fullmatch(value):
            raise ValueError("expected a user id (U…), a user group id (S…), here or channel")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _api_base_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://slack.com/api/")
        return value if value.endswith("/") else value + "/"

    @model_validator(mode="after")
    def _destination(self) -> Config:
        if (self.channel is None) == (self.users is None):
            raise ValueError(
                "set exactly one of channel (a channel id) or users (user ids, for direct messages)"
            )
        if self.users is not None and not self.users:
            raise ValueError("users must name at least one user id")
        return self
