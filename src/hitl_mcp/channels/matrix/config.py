"""Matrix: the channel's config block. Imports nothing heavy: a config is validated without
matrix-nio."""

from __future__ import annotations

import logging
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.durations import bounded
from hitl_mcp.core.retry import RetryPolicy

log = logging.getLogger("hitl_mcp.channels.matrix")

INSTALL_HINT = "the matrix channel needs matrix-nio: pip install 'mcp-hitl[matrix]'"
PART_LIMIT = 4000  # each part of the agent's text; an event is at most 65,536 bytes
#: syncing again after a failure
SYNC_RETRY = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=60.0)
HTTP_TIMEOUT = 15.0

_USER = re.compile(r"@[a-z0-9._=/+-]+:[A-Za-z0-9.-]+(:\d+)?")
_ROOM = re.compile(r"![A-Za-z0-9._=/+-]+:[A-Za-z0-9.-]+(:\d+)?")


class Config(ChannelConfig):
    type: Literal["matrix"] = "matrix"
    homeserver: str
    """The bot's homeserver: ``https://matrix.example.org``."""
    user_id: str
    """The bot's Matrix id: ``@hitl:example.org``."""
    access_token: SecretStr
    """The bot's access token (a login's ``access_token``)."""
    room_id: str
    """The room requests go to: ``!abcdef:example.org`` (Room settings → Advanced)."""
    allowed_users: list[str] = Field(default_factory=list)
    """Matrix ids that may answer: ``@sam:example.org``; nobody may when it is empty (fail closed)."""
    device_id: str = "HITLMCP"
    """The device the access token belongs to."""
    sync_timeout: Annotated[float, bounded(1, 120)] = 30.0
    """How long one ``/sync`` long poll may wait for news."""

    @field_validator("homeserver")
    @classmethod
    def _homeserver(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://matrix.example.org")
        return value.rstrip("/")

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str) -> str:
        if not _USER.fullmatch(value):
            raise ValueError("expected a Matrix user id such as @hitl:example.org")
        return value

    @field_validator("room_id")
    @classmethod
    def _room_id(cls, value: str) -> str:
        if not _ROOM.fullmatch(value):
            raise ValueError("expected a room id such as !abcdef:example.org (not an alias like #room:...)")
        return value

    @field_validator("allowed_users")
    @classmethod
    def _allowed(cls, value: list[str]) -> list[str]:
        for user in value:
            if not _USER.fullmatch(user):
                raise ValueError(f"expected Matrix user ids such as @sam:example.org, got {user!r}")
        return value

    @property
    def answerers(self) -> frozenset[str]:
        return frozenset(self.allowed_users)
