"""The config's people and escalation ladders: who a person is on each channel, and what happens, step
by step, while a request waits.

``people:`` names each person once, with their identity on each channel (keyed by channel name, or by
channel type for every channel of that type). ``escalation:`` holds named ladders; ``defaults`` picks
one per tool and per risk. The cross-checks (unknown channels and people) are in :func:`check`, run
by the loader with line numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from hitl_mcp.config.errors import KeyPath, _show
from hitl_mcp.core.ladders import ON, TERMINAL, LadderConfig, Person
from hitl_mcp.core.quorum import Quorum

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_NAME_HELP = "use 1 to 32 of a-z, 0-9, '_' and '-', starting with a letter or a digit"


class Choice(BaseModel):
    """What ``defaults.<tool>`` (or one of its ``risk`` entries) picks: a ladder and the people."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    escalation: str | None = None
    """A ladder's name; ``none`` for no ladder."""
    to: list[str] | None = None
    """People asked by default (the channels where they have an identity)."""
    approvals: Quorum | None = None
    """For ``request_approval``: how many of which people must approve."""


#: identities a person may have besides their channels': ``oauth``, the subject of their access tokens
IDENTITIES = ("oauth",)
#: the channel type whose people key is ``true`` (no identity: the person's own devices)
PUSH = "webpush"


def check(
    people: Mapping[str, Person],
    escalation: Mapping[str, LadderConfig],
    channels: Mapping[str, str],
    choices: list[tuple[KeyPath, Choice]],
) -> list[tuple[KeyPath, str]]:
    """Names in ``people``, ``escalation`` and the ``defaults`` choices that do not exist; ``channels``
    maps each channel's name to its type."""
    problems: list[tuple[KeyPath, str]] = []
    types = set(channels.values())
    known_channels = (
        f"configured channels: {', '.join(channels)}" if channels else "no channels are configured"
    )
    known_people = f"people: {', '.join(people)}" if people else "no people are configured"
    for name, person in people.items():
        if not _NAME.fullmatch(name):
            problems.append((("people", name), f"person name {_show(name)} is not valid: {_NAME_HELP}"))
        for key in person:
            if key == TERMINAL:
                continue
            if key not in channels and key not in types and key not in IDENTITIES:
                problems.append(
                    (
                        ("people", name, key),
                        f"unknown channel {_show(key)} (a channel name or type, or terminal for "
                        f"the OS user); {known_channels}",
                    )
                )
            elif (channels.get(key, key) == PUSH) != (person[key] == ON):
                said = (
                    f"{_show(key)} takes true: Web Push reaches the devices the person turned on"
                    if channels.get(key, key) == PUSH
                    else f"true is only for a webpush channel: give the person's identity on {_show(key)}"
                )
                problems.append((("people", name, key), said))
    for name, ladder in escalation.items():
        for i, step in enumerate(ladder.steps):
            for j, channel in enumerate(step.notify or ()):
                if channel not in channels:
                    path: KeyPath = ("escalation", name, "steps", i, "notify", j)
                    problems.append((path, f"unknown channel {_show(channel)}; {known_channels}"))
            for j, person_name in enumerate(step.notify_people or ()):
                if person_name not in people:
                    path = ("escalation", name, "steps", i, "notify_people", j)
                    problems.append((path, f"unknown person {_show(person_name)}; {known_people}"))
    ladders = ", ".join([*escalation, "none"])
    for prefix, choice in choices:
        if (
            choice.escalation is not None
            and choice.escalation != "none"
            and choice.escalation not in escalation
        ):
            problems.append(
                (
                    (*prefix, "escalation"),
                    f"unknown escalation {_show(choice.escalation)}; ladders: {ladders}",
                )
            )
        for j, person_name in enumerate(choice.to or ()):
            if person_name not in people:
                problems.append(((*prefix, "to", j), f"unknown person {_show(person_name)}; {known_people}"))
        if choice.approvals is not None:
            problems.extend(_check_quorum(prefix, choice.approvals, choice.to, people, known_people))
    return problems


def _check_quorum(
    prefix: KeyPath, quorum: Quorum, to: list[str] | None, people: Mapping[str, Person], known_people: str
) -> list[tuple[KeyPath, str]]:
    """Approvers who are not people, and more approvals required than people named to give them
    (``of`` unset: the people of ``to``, when the choice names them)."""
    problems: list[tuple[KeyPath, str]] = []
    for j, person_name in enumerate(quorum.of):
        if person_name not in people:
            path: KeyPath = (*prefix, "approvals", "of", j)
            problems.append((path, f"unknown person {_show(person_name)}; {known_people}"))
    of = quorum.of or to or []
    if of and quorum.required > len(set(of)):
        problems.append(
            (
                (*prefix, "approvals", "required"),
                f"{quorum.required} approvals required, but only {len(set(of))} people may give them",
            )
        )
    return problems


def expand_people(
    name: str, block: dict[str, Any], people: Any
) -> tuple[dict[str, Any], list[tuple[KeyPath, str]]]:
    """A channel block whose allow-lists (``allowed_*``) may name people, with each person replaced by
    their identity on this channel: done here, once, so that no channel needs to know about people."""
    if not isinstance(people, dict) or not people:
        return block, []
    kind = block.get("type")
    problems: list[tuple[KeyPath, str]] = []
    out = dict(block)
    for key, value in block.items():
        if not key.startswith("allowed_") or not isinstance(value, list):
            continue
        expanded = []
        for i, item in enumerate(value):
            person = people.get(item) if isinstance(item, str) else None
            if not isinstance(person, dict):
                expanded.append(item)
                continue
            identity = person.get(name, person.get(kind))
            if identity is None:
                problems.append(
                    (
                        ("channels", name, key, i),
                        f"person {_show(item)} has no identity on channel {_show(name)}",
                    )
                )
                continue
            expanded.append(identity)
        out[key] = expanded
    return out, problems
