"""Pushover: the channel's config block and its limits (https://pushover.net/api)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from hitl_mcp.channels.base import ChannelConfig

DEFAULT_API = "https://api.pushover.net"
#: Pushover's limits: a message of 1,024 characters, a title of 250, a URL title of 100
MESSAGE_LIMIT = 1024
TITLE_LIMIT = 250
HTTP_TIMEOUT = 15.0
_KEY = re.compile(r"[A-Za-z0-9]{30}")
PRIORITIES = {"normal": 0, "high": 1, "emergency": 2}


class Config(ChannelConfig):
    type: Literal["pushover"] = "pushover"
    token: SecretStr
    """The application's API token (30 characters), from pushover.net/apps."""
    user: str
    """The user key or group key paged (30 characters)."""
    device: str | None = None
    """Only this device of the user (a name from their Pushover account)."""
    priority: Literal["normal", "high", "emergency"] = "emergency"
    """``emergency`` repeats the alert every ``retry`` until someone acknowledges it or ``expire``
    passes; settling the request cancels it."""
    retry: Annotated[int, Field(ge=30, le=10800)] = 60
    """Seconds between repeats of an emergency page (Pushover: at least 30)."""
    expire: Annotated[int, Field(ge=30, le=10800)] = 3600
    """Seconds an emergency page repeats at most (Pushover: at most 10,800, three hours)."""
    sound: str | None = None
    api_base: str = DEFAULT_API
    poll_seconds: Annotated[float, Field(ge=0.05, le=3600)] = 30.0
    """How often an unacknowledged page's receipt is read (with a public URL, Pushover also calls back)."""

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        if not _KEY.fullmatch(value):
            raise ValueError("a Pushover user or group key is 30 letters and digits")
        return value

    @field_validator("token")
    @classmethod
    def _token(cls, value: SecretStr) -> SecretStr:
        if not _KEY.fullmatch(value.get_secret_value()):
            raise ValueError("a Pushover application token is 30 letters and digits")
        return value

    @field_validator("api_base")
    @classmethod
    def _api(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
            raise ValueError("expected an http(s) URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _window(self) -> Config:
        if self.retry > self.expire:
            raise ValueError("retry must not be longer than expire")
        return self
