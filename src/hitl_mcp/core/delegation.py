"""Delegation: while ``owner`` is away, what would go to them goes to ``backup``.

A delegation comes from the config (``delegations:``) or is set at run time (``hitl-mcp delegate``),
kept in the store's state (channel ``_people``, key ``delegations``) so that every process on the
store sees it. Each has a window (``from_time`` to ``until``). Chains (owner -> backup -> carol) are
followed at most ``MAX_HOPS`` hops, and a loop is refused where it is written (a config error, a
refusal from the CLI or the inbox). The broker applies the delegations active at ask time (where a
request goes) and at vote time (whom a reply stands for); these are pure functions of the list and
the time, apart from :func:`stored` and :func:`store`, which read and write the list, and :func:`put`
and :func:`end`, the one way the CLI and the inbox set and end a run-time delegation: each reads the
list, computes the change and writes it only over what it read (``Store.swap_state``), from a fresh
read when another process changed the list meanwhile, so that two changes at once are both kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from hitl_mcp.core.durations import InstantValidator
from hitl_mcp.core.models import iso

if TYPE_CHECKING:
    from hitl_mcp.core.store import Store

__all__ = [
    "MAX_HOPS",
    "Delegation",
    "Refused",
    "active",
    "chain_problem",
    "delegate_of",
    "end",
    "put",
    "stands_for",
    "store",
    "stored",
    "when",
]

#: the longest chain followed: owner -> a -> b -> c -> d -> e
MAX_HOPS = 5
#: where run-time delegations live in the store's state
STATE = ("_people", "delegations")


def when(value: Any) -> float:
    """A time as seconds since the epoch: an ISO date (00:00 UTC that day) or date-time (UTC unless it
    names its offset), or a number already."""
    if isinstance(value, bool):
        raise ValueError("expected an ISO date or date-time such as 2026-12-24 or 2026-12-24T18:00:00Z")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip().replace("Z", "+00:00")
        # a date with an offset (2026-12-24+01:00) is that day's midnight there; fromisoformat would
        # read the offset as a time of day
        dated = re.fullmatch(r"(\d{4}-\d{2}-\d{2})([+-]\d{2}:\d{2})", text)
        try:
            moment = datetime.fromisoformat(f"{dated[1]}T00:00:00{dated[2]}" if dated else text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an ISO date or date-time such as 2026-12-24 or 2026-12-24T18:00:00Z"
            ) from None
    else:
        raise ValueError("expected an ISO date or date-time such as 2026-12-24")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _moment(value: Any) -> Any:
    try:
        return when(value)
    except ValueError:
        raise PydanticCustomError(
            "moment", "expected an ISO date or date-time such as 2026-12-24 or 2026-12-24T18:00:00Z"
        ) from None


Moment = Annotated[float, InstantValidator(_moment)]


class Delegation(BaseModel):
    """``from`` -> ``to`` between ``from_time`` (unset: at once) and ``until``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    from_: str = Field(alias="from", min_length=1, max_length=32)
    to: str = Field(min_length=1, max_length=32)
    from_time: Moment | None = None
    until: Moment
    set_by: str | None = None
    """Who set it at run time (the CLI's user, the inbox); None for the config's."""
    set_at: float | None = None

    def is_active(self, at: float) -> bool:
        return (self.from_time is None or self.from_time <= at) and at < self.until

    def own_problem(self) -> str | None:
        """What is wrong with this one alone: a self-delegation, an empty window."""
        if self.from_ == self.to:
            return f"{self.from_} cannot delegate to themselves"
        if self.from_time is not None and self.until <= self.from_time:
            return "until must come after from_time"
        return None


def active(delegations: Iterable[Delegation], at: float) -> dict[str, str]:
    """Who stands in for whom at ``at``: ``{from: to}``; for one person, the last one listed wins
    (the run-time ones are listed after the config's)."""
    return {d.from_: d.to for d in delegations if d.is_active(at)}


def delegate_of(person: str, edges: Mapping[str, str]) -> tuple[str, list[str]]:
    """Whom a request for ``person`` goes to, following the chain at most ``MAX_HOPS`` hops and
    stopping before a person is met twice; with the people passed on the way."""
    path = [person]
    while len(path) <= MAX_HOPS and (nxt := edges.get(path[-1])) is not None and nxt not in path:
        path.append(nxt)
    return path[-1], path[1:-1]


def stands_for(person: str, candidates: Sequence[str], edges: Mapping[str, str]) -> str | None:
    """The first of ``candidates`` (not ``person``) whose chain of delegates reaches ``person``."""
    for candidate in candidates:
        if candidate == person:
            continue
        final, between = delegate_of(candidate, edges)
        if person == final or person in between:
            return candidate
    return None


def chain_problem(delegations: Sequence[Delegation]) -> str | None:
    """A loop (``owner -> backup -> owner``) or a chain longer than ``MAX_HOPS``, in words (None when
    there is none). A chain follows a delegation from its ``to`` when the two windows overlap."""

    def walk(path: list[str], last: Delegation) -> str | None:
        for d in delegations:
            if d.from_ != last.to or not _overlap(last, d):
                continue
            if d.to in path:
                return f"delegations form a loop: {' -> '.join([*path[path.index(d.to) :], d.to])}"
            if len(path) > MAX_HOPS:
                return f"a chain of delegations is longer than {MAX_HOPS} hops: {' -> '.join([*path, d.to])}"
            found = walk([*path, d.to], d)
            if found:
                return found
        return None

    for first in delegations:
        if first.from_ != first.to:
            found = walk([first.from_, first.to], first)
            if found:
                return found
    return None


def _overlap(a: Delegation, b: Delegation) -> bool:
    a_start = a.from_time if a.from_time is not None else float("-inf")
    b_start = b.from_time if b.from_time is not None else float("-inf")
    return a_start < b.until and b_start < a.until


# --- run-time delegations in the store ------------------------------------------------------------


async def stored(source: Store) -> list[Delegation]:
    """The run-time delegations (ended and expired ones are removed when the list is written)."""
    return (await _read(source))[1]


async def store(target: Store, delegations: Sequence[Delegation]) -> None:
    """Overwrite the list, whatever it holds now; a change goes through :func:`put` or :func:`end`."""
    await target.set_state(*STATE, _dump(delegations))


#: how many times a change is computed again from a fresh read when another process changed the list
#: between its read and its write (each lost try means another change landed)
ATTEMPTS = 5


async def _read(source: Store) -> tuple[str | None, list[Delegation]]:
    raw = await source.get_state(*STATE)
    return raw, [Delegation.model_validate(item) for item in json.loads(raw or "[]")]


def _dump(delegations: Sequence[Delegation]) -> str:
    # every field is a str, a float (a finite one: ``when`` reads it from a date) or None, as JSON has them
    return json.dumps([d.model_dump(by_alias=True) for d in delegations])


def _contended(what: str) -> ValueError:
    return ValueError(
        f"{what}: the delegations were changed by someone else {ATTEMPTS} times while it was written; "
        "nothing was changed, try again"
    )


class Refused(ValueError):
    """A delegation the rules refuse (to themselves, an empty or past window, a loop, a long chain);
    an unknown person or an unreadable time is a plain ``ValueError``."""


async def put(
    target: Store,
    person: str,
    to: str,
    until: Any,
    from_time: Any = None,
    *,
    people: Iterable[str],
    configured: Sequence[Delegation],
    actor: str,
    at: float,
) -> Delegation:
    """Set (or replace) ``person``'s run-time delegation to ``to`` until ``until`` (from ``from_time``,
    unset: now), audited ``delegation_set`` with ``actor``: what ``hitl-mcp delegate`` and the inbox's
    Away form do. ``people`` are the configured ones, ``configured`` the config's delegations. Raises
    ``ValueError`` (an unknown person, a bad time, other changes kept landing first: see ``ATTEMPTS``)
    or ``Refused`` and changes nothing."""
    known = list(people)
    for name in (person, to):
        if name not in known:
            raise ValueError(f"unknown person {name!r}; people: {', '.join(known) or 'none are configured'}")
    new = Delegation.model_validate(
        {
            "from": person,
            "to": to,
            "from_time": when(from_time) if from_time is not None else None,
            "until": when(until),
            "set_by": actor,
            "set_at": at,
        }
    )
    problem = new.own_problem()
    if problem is None and new.until <= at:
        problem = "until is in the past"
    if problem:
        raise Refused(problem)
    for _ in range(ATTEMPTS):  # read, check, write only over what was read: a change at once is kept
        raw, every = await _read(target)
        runtime = [d for d in every if d.until > at and d.from_ != person]
        problem = chain_problem([new, *configured, *runtime])  # named from the new one
        if problem:
            raise Refused(problem)
        if await target.swap_state(*STATE, raw, _dump([*runtime, new])):
            break
    else:
        raise _contended(f"{person}'s delegation was not set")
    data: dict[str, Any] = {"from": new.from_, "to": new.to, "until": iso(new.until)}
    if new.from_time is not None:
        data["from_time"] = iso(new.from_time)
    await target.record(None, "delegation_set", actor, data)
    return new


async def end(target: Store, person: str, actor: str, at: float) -> list[Delegation]:
    """End ``person``'s run-time delegations now (each audited ``delegation_ended`` with ``actor``),
    and drop the expired ones; the ones ended. Raises ``ValueError`` when other changes kept landing
    first (see ``ATTEMPTS``), having ended nothing."""
    for _ in range(ATTEMPTS):
        raw, every = await _read(target)
        runtime = [d for d in every if d.until > at]
        ending = [d for d in runtime if d.from_ == person]
        if not ending:
            return []
        if await target.swap_state(*STATE, raw, _dump([d for d in runtime if d.from_ != person])):
            break
    else:
        raise _contended(f"{person}'s delegation was not ended")
    for d in ending:  # by the one that wrote the change only
        await target.record(None, "delegation_ended", actor, {"from": d.from_, "to": d.to})
    return ending
