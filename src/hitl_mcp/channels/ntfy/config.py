"""ntfy: the channel's config block and its limits."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, SecretStr, field_validator, model_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.retry import RetryPolicy

DEFAULT_SERVER = "https://ntfy.sh"
#: ntfy turns a longer message into an attachment (publish.md, "Limitations"): we clip instead
MESSAGE_LIMIT = 4096
#: how much of a preview a notification shows whole (bytes of its 4,096): the action is kept short beside it
PREVIEW_BYTES = 2500
TITLE_LIMIT = 250
#: ntfy shows at most three action buttons (publish.md, "Action buttons")
MAX_ACTIONS = 3
LABEL_LIMIT = 40
#: seconds one publish or poll may take
HTTP_TIMEOUT = 15.0
#: the subscription's stream is re-opened with backoff after it drops or fails
STREAM_RETRY = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=60.0)
#: the longest a button's JSON body may be before it is not ours
MAX_ANSWER_BODY = 4096

#: ntfy's own topic rule (server/server.go: topicRegex): what the server accepts, nothing more
_TOPIC = re.compile(r"[-_A-Za-z0-9]{1,64}")
_PRIORITY_NAMES = {"min": 1, "low": 2, "default": 3, "high": 4, "max": 5, "urgent": 5}


def _priority(value: Any) -> Any:
    if isinstance(value, str):
        named = _PRIORITY_NAMES.get(value.strip().lower())
        if named is not None:
            return named
        if value.strip().isdigit():
            return int(value.strip())
        raise ValueError("expected 1 to 5, or min, low, default, high, max or urgent")
    return value


Priority = Annotated[Literal[1, 2, 3, 4, 5], BeforeValidator(_priority)]


class Priorities(BaseModel):
    """How loudly each kind arrives (1 min … 5 max/urgent): ntfy's priorities."""

    model_config = ConfigDict(extra="forbid")

    question: Priority = 3
    approval: Priority = 4
    high_risk: Priority = 5
    """An approval with ``risk: high``."""
    notification: Priority = 3
    error: Priority = 4
    """A notification of level ``error``."""
    settled: Priority = 2
    """The update that replaces the buttons with the outcome: quiet, no buzz."""


class Config(ChannelConfig):
    type: Literal["ntfy"] = "ntfy"
    server: str = DEFAULT_SERVER
    """The ntfy server: ntfy.sh, or your own."""
    topic: str
    """Where requests are published. Anyone who knows it can read it: make it unguessable
    (``hitl-mcp init`` writes a random one)."""
    token: SecretStr | None = None
    """An access token (tk_…) that may write ``topic`` and read ``reply_topic``; or username/password."""
    username: str | None = None
    password: SecretStr | None = None
    reply_topic: str | None = None
    """Where the buttons send answers when there is no public URL; default ``<topic>-replies``."""
    reply_token: SecretStr | None = None
    """A token that may only write ``reply_topic``. It is put into each button, so whoever reads the
    topic sees it: never use ``token`` here."""
    priority: Priorities = Priorities()
    show_payload: bool = False
    """Send an approval's payload, details and context. Off by default: a topic may be public, so only
    the question or action itself is sent, and the rest stays in the inbox."""
    responder: str = "ntfy subscriber"
    """The name an answer is recorded under: ntfy has no identity of its own."""

    @field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("expected an http(s) URL such as https://ntfy.sh")
        return value.rstrip("/")

    @field_validator("topic", "reply_topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is not None and not _TOPIC.fullmatch(value):
            raise ValueError("a topic is 1 to 64 characters: letters, digits, - and _")
        return value

    @field_validator("token", "reply_token", "password")
    @classmethod
    def _not_empty(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _auth(self) -> Config:
        if self.token is not None and (self.username is not None or self.password is not None):
            raise ValueError("set token, or username and password, not both")
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.reply_topic is not None and self.reply_topic == self.topic:
            raise ValueError("reply_topic must differ from topic (answers would show up as notifications)")
        if self.replies == self.topic:  # a 64-character topic: "<topic>-replies" would be too long
            raise ValueError("topic is too long to derive reply_topic from it: set reply_topic")
        return self

    @property
    def replies(self) -> str:
        """The reply topic: set, or ``<topic>-replies`` (when that is a valid topic)."""
        if self.reply_topic is not None:
            return self.reply_topic
        derived = f"{self.topic}-replies"
        return derived if _TOPIC.fullmatch(derived) else self.topic
