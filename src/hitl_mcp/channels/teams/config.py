"""Microsoft Teams: the channel's config block, the clouds' endpoints and Teams' limits. Imports
nothing heavy: a config is validated without the Teams SDK."""

from __future__ import annotations

import logging
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from hitl_mcp.channels.base import ChannelConfig

log = logging.getLogger("hitl_mcp.channels.teams")

INSTALL_HINT = "the teams channel needs the Teams SDK: pip install 'mcp-hitl[teams]'"
MAX_BODY = 256 * 1024  # an inbound activity; an invoke with a card's inputs is a few KB
PART_LIMIT = 4000  # each part of the agent's text on a card (a card's whole payload is ~28 KB)
HTTP_TIMEOUT = 15.0

_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class Endpoints(BaseModel):
    """Addresses that replace the cloud's: the Entra login (where the bot gets its token), the OpenID
    metadata of Bot Framework tokens (whose keys sign what Teams sends) and their issuer. For a
    cloud the Teams SDK does not name, or a local stand-in."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    login: str | None = None
    openid_metadata: str | None = None
    token_issuer: str | None = None


def _url(value: str, example: str, schemes: tuple[str, ...] = ("https", "http")) -> str:
    parts = urlsplit(value)
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"expected an {'/'.join(schemes)} URL such as {example}")
    return value


class Config(ChannelConfig):
    type: Literal["teams"] = "teams"
    app_id: str | None = None
    """The bot's Microsoft App ID (Entra app registration: Application (client) ID)."""
    app_password: SecretStr | None = None
    """The app registration's client secret."""
    tenant_id: str | None = None
    """Where the bot's token comes from: your Entra tenant's id for a single-tenant bot; by default
    the cloud's Bot Framework tenant (a multi-tenant bot)."""
    conversation_id: str | None = None
    """Where requests go: a channel's or chat's conversation id (``19:…@thread.tacv2``); the server's
    log names it when the bot is added to a team or chat."""
    service_url: str = "https://smba.trafficmanager.net/teams/"
    """The Bot Connector of your region, as Teams' activities name it (``serviceUrl``)."""
    allowed_users: list[str] = Field(default_factory=list)
    """Entra object ids (``aadObjectId``) of the people who may answer; nobody may when empty."""
    workflow_url: SecretStr | None = None
    """Notify-only, with no bot: a Workflows "When a Teams webhook request is received" URL. Cards
    link to the inbox; nobody answers in Teams."""
    cloud: Literal["public", "usgov", "usgovdod", "china"] = "public"
    """The Microsoft cloud, as the Teams SDK names it."""
    endpoints: Endpoints = Field(default_factory=Endpoints)

    @field_validator("app_id")
    @classmethod
    def _app(cls, value: str | None) -> str | None:
        if value is not None and not _GUID.fullmatch(value):
            raise ValueError("expected the bot's Microsoft App ID, a GUID (Entra: Application (client) ID)")
        return value

    @field_validator("allowed_users")
    @classmethod
    def _users(cls, value: list[str]) -> list[str]:
        for user in value:
            if not _GUID.fullmatch(user):
                raise ValueError(f"expected Entra object ids (GUIDs), got {user!r}")
        return [user.lower() for user in value]

    @field_validator("service_url")
    @classmethod
    def _service(cls, value: str) -> str:
        return _url(value, "https://smba.trafficmanager.net/teams/")

    @field_validator("workflow_url")
    @classmethod
    def _workflow(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _url(value.get_secret_value(), "https://….logic.azure.com/workflows/…", ("https", "http"))
        return value

    @model_validator(mode="after")
    def _mode(self) -> Config:
        bot = [self.app_id, self.app_password, self.conversation_id]
        if self.workflow_url is not None:
            if any(v is not None for v in bot):
                raise ValueError(
                    "give either a bot (app_id, app_password, conversation_id) or workflow_url, not both"
                )
            return self
        missing = [
            k for k, v in zip(("app_id", "app_password", "conversation_id"), bot, strict=True) if not v
        ]
        if missing:
            raise ValueError(
                f"a Teams bot needs {', '.join(missing)} (or give workflow_url for notify-only cards)"
            )
        return self

    @property
    def bot(self) -> bool:
        return self.workflow_url is None

    @property
    def answerers(self) -> frozenset[str]:
        return frozenset(self.allowed_users)
