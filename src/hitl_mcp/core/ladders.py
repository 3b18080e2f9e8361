"""Escalation ladders as the config writes them, and who a person is on each channel: the values
``core.escalation`` plans steps from, validated where they are read (``config`` adds the cross-checks
with line numbers)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from hitl_mcp.core.durations import DAY, bounded

__all__ = ["Address", "LadderConfig", "Person", "StepConfig"]

_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")


def _address(value: Any) -> Any:
    """A channel identity: a string, or a number (a Telegram user id) kept as its digits; ``true``
    for a channel that needs none (``webpush``: the person's own devices), kept as ``"on"``."""
    if value is True:
        return ON
    if isinstance(value, bool) or value is None:
        raise PydanticCustomError("address", "expected the person's identity on that channel")
    if isinstance(value, int):
        return str(value)
    return value


#: the identity ``true`` stands for
ON = "on"
Address = Annotated[str, BeforeValidator(_address), Field(min_length=1)]
Person = dict[str, Address]
#: the key of a person (``people:``) that names their OS user, whose answers at the terminal (the
#: CLI's ``answer``, ``approve``, ``deny``) are theirs
TERMINAL = "terminal"


def _fraction(value: Any) -> Any:
    """``50%`` (a fraction of the request's window) as 0.5."""
    match = _PERCENT.fullmatch(value) if isinstance(value, str) else None
    if match is None or not 0 <= float(match.group(1)) <= 100:
        raise PydanticCustomError("fraction", "expected a share of the window such as 50%")
    return float(match.group(1)) / 100


class StepConfig(BaseModel):
    """One rung: when (exactly one of ``after``, a duration from the ask, and ``at``, a share of the
    request's window) and what (exactly one of ``notify``, ``notify_people`` and ``remind``). Every
    step is dropped once the request settles; ``unless: answered`` says so in the file."""

    # built at first use: only a config with an `escalation` section validates a ladder on its own (the
    # Config model builds its own validator for them, at the first config read)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    after: Annotated[float, bounded(0, 30 * DAY)] | None = None
    at: Annotated[float, BeforeValidator(_fraction)] | None = None
    notify: Annotated[list[str], Field(min_length=1)] | None = None
    """Send the request on these channels too."""
    notify_people: Annotated[list[str], Field(min_length=1)] | None = None
    """Send it on the channels where these people have an identity."""
    remind: bool = False
    """Remind on every channel the request was sent on ("Still waiting: ...")."""
    unless: Literal["answered"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_when_one_what(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        when = [k for k in ("after", "at") if data.get(k) is not None]
        if len(when) != 1:
            raise ValueError("a step needs one of 'after' (a duration) or 'at' (a share of the window)")
        what = [k for k in ("notify", "notify_people", "remind") if data.get(k) not in (None, False)]
        if len(what) != 1:
            raise ValueError(
                "a step does one thing: 'notify: [channels]', 'notify_people: [people]' or 'remind: true'"
            )
        return data


class LadderConfig(BaseModel):
    """A named ladder: its steps, and what its request's timeout does (``keep_pending``: nothing;
    the request stays answerable and its window only places the ``at`` steps)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # as StepConfig's

    steps: Annotated[list[StepConfig], Field(min_length=1)]
    on_timeout: Literal["expire", "keep_pending"] = "expire"
