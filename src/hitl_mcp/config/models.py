"""The config's models: what each top-level section may hold, with its defaults.

Channel blocks are each validated by their own channel module's ``Config``; here they are only named
and cross-checked against the default channel lists.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hitl_mcp.channels import channel_module
from hitl_mcp.channels import elicitation as elicitation_channel
from hitl_mcp.channels import web as web_channel
from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.config import escalation as ladders
from hitl_mcp.config.errors import KeyPath, _key_text, _show
from hitl_mcp.config.section import Section as _Section
from hitl_mcp.config.server import (
    AgentConfig,
    ServerConfig,
)
from hitl_mcp.core.delegation import Delegation, chain_problem
from hitl_mcp.core.durations import DAY, HOUR, bounded
from hitl_mcp.core.ladders import LadderConfig, Person
from hitl_mcp.core.principal import check_agent_name
from hitl_mcp.core.quorum import Quorum

ChannelList = Annotated[list[str], Field(min_length=1)]


class ToolDefaults(_Section):
    channels: ChannelList = Field(default_factory=lambda: ["web"])
    timeout: Annotated[float, bounded(1, 30 * DAY)] = DAY
    """How long the request stays answerable, in seconds (its window, under ``keep_pending``)."""
    to: list[str] | None = None
    """People asked besides ``channels``: the channels where they have an identity."""
    escalation: str | None = None
    """The ladder: a name under ``escalation``, or ``none``. Unset: the ladder named ``default``, if any."""


class RiskChoice(_Section):
    """What a risk level changes for ``request_approval``: its ladder, its people."""

    escalation: str | None = None
    to: list[str] | None = None
    approvals: Quorum | None = None
    """How many of which people must approve (quorum.md)."""


RiskLevel = Literal["low", "medium", "high"]


class ApprovalDefaults(ToolDefaults):
    timeout: Annotated[float, bounded(1, 30 * DAY)] = HOUR
    approvals: Quorum | None = None
    """How many of which people must approve, unless the risk or the call says otherwise."""
    step_up: list[RiskLevel] = Field(default_factory=lambda: list[RiskLevel](["high"]))
    """The risks whose approval counts only with a fresh passkey assertion in the inbox (people.md):
    ``[high]`` by default, ``[]`` for none. It applies once the config names people."""
    risk: dict[Literal["low", "medium", "high"], RiskChoice] = Field(default_factory=dict)


class NotifyDefaults(_Section):
    channels: ChannelList = Field(default_factory=lambda: ["web"])
    to: list[str] | None = None


class Defaults(_Section):
    heartbeat_seconds: Annotated[float, bounded(1, 300)] = 10.0
    max_block_seconds: Annotated[float, bounded(1, DAY)] | None = None
    ask_user: ToolDefaults = Field(default_factory=lambda: ToolDefaults(channels=["web"], timeout=DAY))
    request_approval: ApprovalDefaults = Field(
        default_factory=lambda: ApprovalDefaults(channels=["web"], timeout=HOUR)
    )
    notify_user: NotifyDefaults = Field(default_factory=lambda: NotifyDefaults(channels=["web"]))

    @model_validator(mode="before")
    @classmethod
    def _approval_timeout_default(cls, data: Any) -> Any:
        # request_approval given without a timeout keeps its own default (1h), not ask_user's (24h)
        if isinstance(data, dict):
            block = data.get("request_approval")
            if isinstance(block, dict) and "timeout" not in block:
                data = {**data, "request_approval": {**block, "timeout": HOUR}}
        return data


class HostOverride(_Section):
    budget_seconds: Annotated[float, bounded(1, DAY)]
    """How long one tool call may block for this host before returning ``pending``."""


_CHANNEL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_CHANNEL_NAME_HELP = "use 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or a digit"
_SKIP_CROSS_CHECKS = "hitl_mcp.config.skip_cross_checks"


def _default_channels() -> dict[str, ChannelConfig]:
    """The embedded default: the web inbox, and the host's own window when the client can show a form."""
    return {"web": web_channel.Config(), "elicitation": elicitation_channel.Config()}


def _form_channels(channels: Any) -> list[str]:
    """The names of the host-form channels in a ``channels`` value (as written, or as built)."""
    if channels is None:
        channels = _default_channels()
    if not isinstance(channels, dict):
        return []
    names = []
    for name, block in channels.items():
        kind = block.get("type") if isinstance(block, dict) else getattr(block, "type", None)
        if _is_form(kind):
            names.append(str(name))
    return names


def _is_form(kind: Any) -> bool:
    """Whether a channel type is the host's own form (its channel class says so)."""
    try:
        return isinstance(kind, str) and channel_module(kind).Channel.is_form
    except (KeyError, ImportError, AttributeError):  # not a channel type: validation says so
        return False


class Config(_Section):
    server: ServerConfig = Field(default_factory=ServerConfig)
    defaults: Defaults = Field(default_factory=Defaults)
    hosts: dict[str, HostOverride] = Field(default_factory=dict)
    """Per-host overrides, keyed by the MCP ``clientInfo.name``."""
    channels: dict[str, SerializeAsAny[ChannelConfig]] = Field(default_factory=_default_channels)
    """Each value is an instance of its channel module's own ``Config`` class."""
    people: dict[str, Person] = Field(default_factory=dict)
    """Each person once, with their identity per channel (by channel name, or type)."""
    escalation: dict[str, LadderConfig] = Field(default_factory=dict)
    """Named ladders of scheduled steps; ``defaults`` picks one per tool and per risk."""
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Credentials for ``/mcp`` over HTTP, by agent name (``principal.py``)."""
    delegations: list[Delegation] = Field(default_factory=list)
    """Who stands in for whom, and when (``{from, to, from_time?, until}``); see docs/quorum.md."""
    source: Path | None = Field(default=None, exclude=True)
    """The file this config came from; None for the embedded default. Not a YAML key."""

    def channel_names(self) -> list[str]:
        return list(self.channels)

    @field_validator("agents", mode="after")
    @classmethod
    def _agent_names(cls, agents: dict[str, AgentConfig]) -> dict[str, AgentConfig]:
        for name in agents:
            try:
                check_agent_name(name)
            except ValueError as exc:
                raise PydanticCustomError("agent_name", str(exc)) from None
        return agents

    @model_validator(mode="before")
    @classmethod
    def _forms_in_default_lists(cls, data: Any) -> Any:
        """``ask_user`` and ``request_approval`` without a ``channels`` list of their own go to the
        web inbox and to every elicitation channel configured (the host's form is offered only
        when the client can show it)."""
        if not isinstance(data, dict):
            return data
        forms = _form_channels(data.get("channels"))
        defaults = data.get("defaults")
        if not forms or not isinstance(defaults, dict | None):
            return data
        defaults = dict(defaults or {})
        for tool in ("ask_user", "request_approval"):
            block = defaults.get(tool)
            if isinstance(block, dict | None) and "channels" not in (block or {}):
                defaults[tool] = {**(block or {}), "channels": ["web", *forms]}
        return {**data, "defaults": defaults}

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Config:
        if info.context and info.context.get(_SKIP_CROSS_CHECKS):
            return self  # parse_config runs them itself, with line numbers
        problems = _cross_check(self)
        if problems:
            path, message = problems[0]
            raise ValueError(f"{_key_text(path)}: {message}")
        return self


def _cross_check(config: Config, hidden: Collection[KeyPath] = ()) -> list[tuple[KeyPath, str]]:
    """Channel names that are not valid, and default channel lists that name unknown channels.

    A name at a path in ``hidden`` (it came from the environment) is not repeated in the message."""
    problems: list[tuple[KeyPath, str]] = []
    for name in config.channels:
        if not _CHANNEL_NAME.fullmatch(name):
            problems.append(
                (("channels", name), f"channel name {_show(name)} is not valid: {_CHANNEL_NAME_HELP}")
            )
    names = list(config.channels)
    known = f"configured channels: {', '.join(names)}" if names else "no channels are configured"
    for tool in ("ask_user", "request_approval", "notify_user"):
        block: ToolDefaults | NotifyDefaults = getattr(config.defaults, tool)
        for i, name in enumerate(block.channels):
            path = ("defaults", tool, "channels", i)
            if name not in config.channels:
                shown = "(a name from the environment)" if path in hidden else _show(name)
                problems.append((path, f"unknown channel {shown}; {known}"))
    d = config.defaults
    choices: list[tuple[KeyPath, ladders.Choice]] = [
        (("defaults", "ask_user"), ladders.Choice(escalation=d.ask_user.escalation, to=d.ask_user.to)),
        (
            ("defaults", "request_approval"),
            ladders.Choice(
                escalation=d.request_approval.escalation,
                to=d.request_approval.to,
                approvals=d.request_approval.approvals,
            ),
        ),
    ]
    choices.append((("defaults", "notify_user"), ladders.Choice(to=d.notify_user.to)))
    for risk, choice in d.request_approval.risk.items():
        choices.append((("defaults", "request_approval", "risk", risk), ladders.Choice(**dict(choice))))
    types = {name: block.type for name, block in config.channels.items()}
    problems.extend(ladders.check(config.people, config.escalation, types, choices))
    problems.extend(_check_delegations(config))
    return problems


def _check_delegations(config: Config) -> list[tuple[KeyPath, str]]:
    """Delegations between people the config names, each with a window, and no loop or long chain."""
    problems: list[tuple[KeyPath, str]] = []
    people = f"people: {', '.join(config.people)}" if config.people else "no people are configured"
    for i, d in enumerate(config.delegations):
        for key, name in (("from", d.from_), ("to", d.to)):
            if name not in config.people:
                problems.append((("delegations", i, key), f"unknown person {_show(name)}; {people}"))
        problem = d.own_problem()
        if problem:
            problems.append((("delegations", i), problem))
    if not problems:
        loop = chain_problem(config.delegations)
        if loop:
            problems.append((("delegations",), loop))
    return problems


_TOP_KEYS = [name for name, f in Config.model_fields.items() if not f.exclude]
