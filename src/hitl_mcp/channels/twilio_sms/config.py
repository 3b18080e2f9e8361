"""SMS through Twilio: the channel's config block (numbers in E.164)."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from hitl_mcp.channels.base import (
    ChannelConfig,
)
from hitl_mcp.core.durations import bounded
from hitl_mcp.core.retry import RetryPolicy

log = logging.getLogger("hitl_mcp.channels.twilio_sms")

TWILIO_API = "https://api.twilio.com"
#: Twilio refuses a longer body (error 21617)
MAX_CHARS = 1600
#: with a link to the inbox page, the question itself is cut to this many characters
CUT_WITH_LINK = 300
#: codes handed out recently, not handed out again while a late reply to them could still arrive
RECENT_CODES = 1000
#: polling asks for messages sent this long before the mark too: Twilio's list may show a message
#: late, and its DateSent filter is coarse. Messages seen before are skipped by their MessageSid.
POLL_OVERLAP = timedelta(seconds=60)
#: texts back to someone who texted us (confirmations, help): 429s retried briefly, nothing else
REPLY_RETRY = RetryPolicy(
    initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=5.0, maximum_attempts=3
)
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'

# Twilio's own opt-out keywords (its Advanced Opt-Out defaults), matched as the whole message
STOP_WORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"})
START_WORDS = frozenset({"START", "UNSTOP"})
HELP_WORDS = frozenset({"HELP", "INFO"})

_E164 = re.compile(r"\+[1-9]\d{6,14}")
_CODE = re.compile(r"\d{4}")


# ----------------------------------------------------------------------------------------- config


def _phone(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    cleaned = re.sub(r"[\s().-]", "", value)
    if not _E164.fullmatch(cleaned):
        raise ValueError("expected a phone number in E.164 form, such as +15550002222")
    return cleaned


Phone = Annotated[str, BeforeValidator(_phone)]


class Config(ChannelConfig):
    type: Literal["twilio_sms"] = "twilio_sms"
    account_sid: str
    auth_token: SecretStr
    from_: Phone | None = Field(None, alias="from")
    """The Twilio number that sends, and that people text back (E.164)."""
    messaging_service_sid: str | None = None
    """A Messaging Service to send through instead of (or as well as) ``from``."""
    to: Annotated[list[Phone], Field(min_length=1)]
    allowed_numbers: list[Phone] | None = None
    """Who may answer; unset means the numbers in ``to``."""
    mode: Literal["auto", "webhook", "poll"] = "auto"
    """auto: the webhook when ``server.public_url`` is set, else polling."""
    poll_interval: Annotated[float, bounded(0.1, 3600)] = 5.0
    api_base_url: str = TWILIO_API
    notify_on_retract: bool = False
    """Text the recipients when a request is settled elsewhere (answered, expired or cancelled)."""

    @field_validator("account_sid")
    @classmethod
    def _check_account_sid(cls, value: str) -> str:
        if not re.fullmatch(r"AC[0-9a-fA-F]{32}", value):
            raise ValueError("expected an Account SID: AC followed by 32 hexadecimal digits")
        return value

    @field_validator("messaging_service_sid")
    @classmethod
    def _check_service_sid(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"MG[0-9a-fA-F]{32}", value):
            raise ValueError("expected a Messaging Service SID: MG followed by 32 hexadecimal digits")
        return value

    @field_validator("auth_token")
    @classmethod
    def _check_token(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("expected an http:// or https:// URL such as https://api.twilio.com")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _needs_sender(self) -> Config:
        if self.from_ is None and self.messaging_service_sid is None:
            raise ValueError("set 'from' (the Twilio number, E.164) or 'messaging_service_sid'")
        return self

    @property
    def answerers(self) -> frozenset[str]:
        return frozenset(self.allowed_numbers if self.allowed_numbers is not None else self.to)
