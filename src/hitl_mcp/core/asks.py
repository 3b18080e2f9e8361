"""What a tool asks the broker for (``AskSpec``), and the defaults it falls back on (``AskDefaults``).
Kept apart from the broker so that the tools can build one without loading it (cold start)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hitl_mcp.core.models import Kind, Level, Risk
from hitl_mcp.core.quorum import Quorum


@dataclass
class AskSpec:
    kind: Kind
    text: str
    title: str | None = None
    details: str | None = None
    context: str | None = None
    choices: list[str] | None = None
    allow_free_text: bool | None = None
    payload: Any = None
    preview: Any = None
    """For an approval: what it will do as a person reads it (``previews.Preview``, or its JSON);
    the broker normalises and hashes it, and raises ``risk`` by what it shows."""
    risk: Risk | None = None
    level: Level | None = None
    default_answer: str | None = None
    channels: list[str] | None = None
    to: list[str] | None = None
    """People asked (config ``people``): the channels where they have an identity, with ``channels``."""
    approvals: Quorum | None = None
    """For an approval: how many of which people must approve (``of`` empty: the people asked)."""
    timeout_seconds: float | None = None
    idempotency_key: str | None = None
    session_key: str | None = None
    client_name: str | None = None
    owner: str = ""
    """The principal that asks (``principal.Principal.owner``): its keys, its requests."""
    forms: bool = True
    """Whether the host's form may be one of its channels. The gate (proxy and hooks) asks with
    False: it forwards only what a person approved on a person channel."""


@dataclass(frozen=True)
class AskDefaults:
    """Per-kind channels and lifetimes, from the config's ``defaults``."""

    channels: Mapping[Kind, list[str]]
    timeouts: Mapping[Kind, float]
