"""Email: the channel's config block (SMTP, IMAP, addresses)."""

from __future__ import annotations

import logging
import re
from email.utils import parseaddr
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from hitl_mcp.channels.base import (
    ChannelConfig,
)
from hitl_mcp.core.durations import bounded
from hitl_mcp.kit.net import is_loopback

log = logging.getLogger("hitl_mcp.channels.email")

# --------------------------------------------------------------------------------------------- config


def _address(value: str) -> str:
    """The bare address in ``"Name <a@b>"`` or ``"a@b"``, lower-cased; ``""`` when there is none."""
    addr = parseaddr(value)[1].strip().lower()
    return addr if re.fullmatch(r"[^@\s<>]+@[^@\s<>]+", addr) else ""


def _check_address(value: str) -> str:
    if not isinstance(value, str) or not _address(value):
        raise ValueError("expected an email address such as alice@example.com or 'Alice <alice@example.com>'")
    return value.strip()


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Addresses = Annotated[list[str], BeforeValidator(_as_list)]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    port: int | None = Field(None, ge=1, le=65535)
    tls: bool | None = None
    """Implicit TLS from the first byte (SMTP port 465, IMAP port 993)."""
    starttls: bool | None = None
    """Plain connection upgraded with STARTTLS (SMTP port 587, IMAP port 143)."""
    timeout: Annotated[float, bounded(1, 300)] = 20.0
    ca_file: Path | None = None
    """CA certificates to trust instead of the system's (a self-hosted server with its own CA)."""

    @field_validator("ca_file", mode="before")
    @classmethod
    def _no_ca_file(cls, value: Any) -> Any:
        return None if value == "" else value  # ${EMAIL_CA_FILE:-} left empty

    @model_validator(mode="after")
    def _tls_choice(self) -> _Block:
        if self.tls and self.starttls:
            raise ValueError("set tls (implicit TLS) or starttls, not both")
        password = getattr(self, "password", None)
        if password is not None and self.security == "plain" and not is_loopback(self.host):
            raise ValueError(
                "refusing to send a password without TLS to a host that is not loopback: set tls or starttls"
            )
        return self

    @property
    def security(self) -> Literal["tls", "starttls", "plain"]:
        raise NotImplementedError


class SmtpConfig(_Block):
    username: str | None = None
    password: SecretStr | None = None

    @property
    def security(self) -> Literal["tls", "starttls", "plain"]:
        if self.tls:
            return "tls"
        return "plain" if self.starttls is False else "starttls"

    @property
    def port_number(self) -> int:
        return self.port or {"tls": 465, "starttls": 587, "plain": 25}[self.security]


class ImapConfig(_Block):
    username: str = Field(min_length=1)
    password: SecretStr
    folder: str = Field(default="INBOX", min_length=1)
    poll_interval: Annotated[float, bounded(0.05, 3600)] = 30.0
    """Seconds between polls; IDLE (where the server has it) may wake the poller sooner."""

    @property
    def security(self) -> Literal["tls", "starttls", "plain"]:
        if self.starttls:
            return "starttls"
        return "plain" if self.tls is False else "tls"

    @property
    def port_number(self) -> int:
        return self.port or (993 if self.security == "tls" else 143)


class Config(ChannelConfig):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["email"] = "email"
    smtp: SmtpConfig
    from_: str = Field(alias="from")
    """The sender: ``hitl@example.com`` or ``"hitl <hitl@example.com>"``."""
    to: Annotated[Addresses, Field(min_length=1)]
    imap: ImapConfig | None = None
    """Where replies are read; without it, answers come through links only."""
    allowed_senders: Addresses | None = None
    """Who may answer; default: ``to``."""
    link_ttl: Annotated[float, bounded(60, 90 * 86400)] | None = None
    """How long an answer link stays valid; default: the request's lifetime."""
    reply_to: str | None = None
    """The mailbox replies go to (read through ``imap``); default: ``from``."""
    plus_addressing: bool = True
    """Tag the Reply-To with the token (``local+hitl...@``); turn off where the provider has no plus
    addresses: the token then travels in the Message-ID only."""
    follow_up: bool = False
    """Mail the recipients "answered by X via Y" once the request is settled."""

    @field_validator("from_", "reply_to")
    @classmethod
    def _one_address(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)

    @field_validator("to", "allowed_senders")
    @classmethod
    def _addresses(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_check_address(v) for v in value]
