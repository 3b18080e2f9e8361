"""People and escalation ladders, as the broker uses them: who a channel identity is, which channels
reach a person, which ladder a request follows, and when each of its steps is due.

Pure functions of the config; no I/O. The steps it plans are rows the store schedules with the
request (``PlannedStep``), run by the outbox when due.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from hitl_mcp.core.delegation import Delegation, active, delegate_of, stands_for
from hitl_mcp.core.errors import UnknownChannel
from hitl_mcp.core.ladders import TERMINAL, LadderConfig, StepConfig
from hitl_mcp.core.models import Kind
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.store import PlannedStep

if TYPE_CHECKING:
    from hitl_mcp.core.models import Request

__all__ = ["TERMINAL", "TERMINAL_CHANNEL", "Choice", "Policy"]

#: the channel the CLI's answers are recorded under
TERMINAL_CHANNEL = "cli"
#: channel types whose verified identity is the person signed in to the inbox, by name: the inbox,
#: and Web Push (its buttons carry a token bound to the person who turned notifications on)
SIGNED_IN = ("web", "webpush")


@dataclass(frozen=True)
class Choice:
    """What a tool's defaults pick (per risk, for approvals): a ladder's name and the people asked."""

    escalation: str | None = None
    to: Sequence[str] | None = None
    approvals: Quorum | None = None


@dataclass
class Policy:
    """``people``: person -> {channel name or type: identity}; ``types``: channel name -> type;
    ``choices``: per kind, and per (kind, risk), what the config's ``defaults`` pick."""

    people: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    ladders: Mapping[str, LadderConfig] = field(default_factory=dict)
    types: Mapping[str, str] = field(default_factory=dict)
    choices: Mapping[Kind | tuple[Kind, str], Choice] = field(default_factory=dict)
    delegations: Sequence[Delegation] = ()
    """The config's delegations (``at`` adds the run-time ones)."""
    delegates: Mapping[str, str] = field(default_factory=dict)
    """Who stands in for whom at one moment (see ``at``): ``{from: to}``."""
    step_up: frozenset[str] = frozenset()
    """The risks whose approval needs a passkey step-up (``defaults.request_approval.step_up``)."""

    def needs_step_up(self, kind: Kind, risk: str | None) -> bool:
        """Whether an approval of this risk counts only with a passkey assertion: only where there are
        people to hold passkeys."""
        return kind == Kind.APPROVAL and (risk or "medium") in self.step_up and bool(self.people)

    # --- people ----------------------------------------------------------------------------

    def at(self, moment: float, more: Sequence[Delegation] = ()) -> Policy:
        """This policy with the delegations (the config's, then ``more``) active at ``moment``."""
        return replace(self, delegates=active([*self.delegations, *more], moment))

    def delegated(self, people: Sequence[str]) -> dict[str, str]:
        """Each of ``people`` who is away, and who stands in for them now: ``{owner: backup}``."""
        found = {p: delegate_of(p, self.delegates)[0] for p in people}
        return {p: d for p, d in found.items() if d != p}

    def on_behalf_of(self, person: str | None, request: Request) -> str | None:
        """Whom ``person`` answers for as a delegate: a quorum's approver (whose seat is not taken
        yet), or one of the people asked; None when they answer as themselves."""
        if person is None:
            return None
        if request.approvals is not None:
            if person in request.approvals.of:
                return None
            of, taken = request.approvals.of, {v.seat for v in request.votes}
            free = stands_for(person, [p for p in of if p not in taken], self.delegates)
            return free or stands_for(person, of, self.delegates)  # a taken seat: "already voted"
        if request.to and person not in request.to:
            return stands_for(person, request.to, self.delegates)
        return None

    def asked_of(self, request: Request) -> list[str]:
        """Everyone ``request`` is asked of: its ``to``, a quorum's approvers, and the people its
        ladder goes on to (``notify_people``: the escalation's someone else, who may answer it too)."""
        ladder, _ = self.choose(request.kind, request.risk)
        later = [p for step in (ladder.steps if ladder else []) for p in step.notify_people or []]
        return [*(request.to or []), *(request.approvals.of if request.approvals else []), *later]

    def asked(
        self, kind: Kind, risk: str | None, channels: Sequence[str] | None, to: Sequence[str] | None
    ) -> list[str] | None:
        """The people a request asks: the call's ``to``, else (a call naming no channels either) the
        defaults' people."""
        if to or channels:
            return list(to) if to else None
        return self.choose(kind, risk)[1] or None

    def identity(self, person: str, channel: str) -> str | None:
        """The person's identity on a channel: given for the channel by name, else for its type."""
        address = self.people.get(person, {})
        return address.get(channel, address.get(self.types.get(channel, "")))

    def channels_of(self, people: Sequence[str]) -> list[str]:
        """The channels on which these people have an identity, in config order."""
        unknown = [p for p in people if p not in self.people]
        if unknown:
            known = ", ".join(self.people) or "(none configured)"
            raise UnknownChannel(f"unknown person {', '.join(map(repr, unknown))}; people: {known}")
        people = [delegate_of(p, self.delegates)[0] for p in people]  # those away: their delegates
        found = [c for c in self.types if any(self.identity(p, c) is not None for p in people)]
        if not found:  # people known only at the terminal, say: every person may sign in to the inbox
            found = [c for c, kind in self.types.items() if kind == "web"]
        if not found:
            raise UnknownChannel(
                f"{', '.join(map(repr, people))} ha{'s' if len(people) == 1 else 've'} "
                "no identity on any configured channel"
            )
        return found

    def person_of(self, channel: str, identity: str | None) -> str | None:
        """Whose verified identity this is on this channel (compared without case: e-mail addresses).
        At the terminal (the CLI's answers) it is the OS user, under the person's ``terminal`` key; in
        the inbox (a channel of type ``web``) and from its pushes (``webpush``) the person signed in,
        by name."""
        if identity is None:
            return None
        if channel == TERMINAL_CHANNEL:
            key = TERMINAL
        elif self.types.get(channel) in SIGNED_IN:
            return identity if identity in self.people else None
        else:
            key = channel
        wanted = identity.strip().casefold()
        for person in self.people:
            found = self.identity(person, key)
            if found is not None and found.strip().casefold() == wanted:
                return person
        return None

    # --- ladders ---------------------------------------------------------------------------

    def choose(self, kind: Kind, risk: str | None) -> tuple[LadderConfig | None, list[str]]:
        """The ladder a request of this kind and risk follows, and the people its defaults ask: the
        risk's choice over the tool's; a tool that names no ladder follows the one named ``default``."""
        tool = self.choices.get(kind, Choice())
        by_risk = self.choices.get((kind, risk or "medium"), Choice())
        name = by_risk.escalation or tool.escalation or "default"
        to = by_risk.to if by_risk.to is not None else tool.to
        return (None if name == "none" else self.ladders.get(name)), list(to or [])

    def quorum(
        self, kind: Kind, risk: str | None, given: Quorum | None, to: Sequence[str] | None
    ) -> Quorum | None:
        """The quorum an approval needs (the call's, else its risk's, else the tool's default), with
        ``of`` filled in: the call's or the defaults' people asked when it names none. Raises
        ``UnknownChannel`` for unknown people or more approvals required than people to give them."""
        if kind != Kind.APPROVAL:
            return None
        tool = self.choices.get(kind, Choice())
        by_risk = self.choices.get((kind, risk or "medium"), Choice())
        quorum = given or by_risk.approvals or tool.approvals
        if quorum is None:
            return None
        of = list(dict.fromkeys(quorum.of or to or self.choose(kind, risk)[1]))
        if not of:
            raise UnknownChannel("approvals: name the people who approve in `of`, or ask people with `to`")
        unknown = [p for p in of if p not in self.people]
        if unknown:
            known = ", ".join(self.people) or "(none configured)"
            names = ", ".join(map(repr, unknown))
            raise UnknownChannel(f"approvals: unknown person {names}; people: {known}")
        if quorum.required > len(of):
            raise UnknownChannel(
                f"approvals: {quorum.required} required, but only {len(of)} "
                f"{'person' if len(of) == 1 else 'people'} may approve ({', '.join(of)})"
            )
        return quorum.model_copy(update={"of": of})

    def route(
        self,
        kind: Kind,
        risk: str | None,
        channels: Sequence[str] | None,
        to: Sequence[str] | None,
        defaults: Mapping[Kind, Sequence[str]],
    ) -> tuple[list[str] | None, LadderConfig | None]:
        """The channel names a request goes to at once (None: the tool's defaults), and its ladder.
        The call's ``channels`` and ``to`` together replace the defaults' channels and people."""
        ladder, default_to = self.choose(kind, risk)
        if kind == Kind.NOTIFICATION:
            ladder = None
        names, people = (channels, to) if channels or to else (None, default_to)
        if not people:
            return (list(names) if names else None), ladder
        first = names or ([] if to else defaults[kind])
        return [*first, *self.channels_of(people)], ladder

    def plan(self, ladder: LadderConfig, created_at: float, window: float | None) -> list[PlannedStep]:
        """The ladder's steps with their due times: ``after`` from the ask, ``at`` a share of the window
        (the request's timeout, also under ``keep_pending``)."""
        return [self._planned(n, step, created_at, window) for n, step in enumerate(ladder.steps, 1)]

    def _planned(self, number: int, step: StepConfig, created_at: float, window: float | None) -> PlannedStep:
        if step.at is not None:
            if window is None:
                raise UnknownChannel("an 'at: N%' escalation step needs a timeout to take a share of")
            due = created_at + step.at * window
        else:
            due = created_at + (step.after or 0.0)
        if step.remind:
            return PlannedStep(number, due, "remind", [], "remind")
        if step.notify_people:
            channels = self.channels_of(step.notify_people)
            return PlannedStep(number, due, "notify", channels, f"notify {', '.join(step.notify_people)}")
        channels = list(step.notify or [])
        return PlannedStep(number, due, "notify", channels, f"notify {', '.join(channels)}")
