"""The broker's gate in front of a new approval: the kill switch (pause) and remembered answers (rules).

While approvals are **paused** (``hitl-mcp pause``, or the inbox's button), a new approval is created
and settled at once, as cancelled with ``approved: false`` and the comment "paused by <who>: <reason>"
(never worded as a person's denial); remembered rules do not fire; and expiries wait: on ``resume``
every pending request's expiry is pushed back by the time paused. Questions and notifications still
flow. The pause is store state (``_hitl``/``paused``), so every process on the database sees it.

A **rule** (``rules.py``) that covers a new approval answers it: the request is stored with no channel
to send to, then one use of the rule is spent (``store.fire_rule``, atomic across processes) and the
request settled as approved by ``rule <id>`` via ``rule``, with a ``rule_fired`` audit row naming the
rule and who made it. A repeat (an idempotency key, or the same pending ask) spends a use only if it
finds its request pending; one that finds it settled spends none. In the rare race where every
matching rule ran out between the match and the firing, the new request is withdrawn with a comment
saying so, and the agent asks again (a person, this time).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio

from hitl_mcp.broker.outbox import silent_channels
from hitl_mcp.channels.base import Channel
from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, Reply, Request, Settled, Status, now
from hitl_mcp.core.outcomes import expiry_outcome
from hitl_mcp.core.rules import (
    DEFAULT_HOURS,
    MAX_RULE_ID,
    MAX_USES,
    RULE_CHANNEL,
    check_max_risk,
    check_name,
    check_pattern,
    check_shown,
    exactly,
    matches,
    subject,
    words,
)
from hitl_mcp.core.store import PAUSE_STATE, RuleRow, Store

log = logging.getLogger("hitl_mcp.broker")


@dataclass(frozen=True)
class Pause:
    by: str
    reason: str
    at: float

    @property
    def words(self) -> str:
        """``paused by alice: deploy freeze``: what a denied approval's outcome says."""
        return f"paused by {self.by}" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Remembered:
    """The live rules that match a new approval, newest first: the first that still has a use fires."""

    rules: list[RuleRow]


Gate = Pause | Remembered

#: what a new approval says when the rules that matched it ran out before one could fire
RAN_OUT = "not asked: the remembered rule that matched it ran out as it was asked; ask again"


class BrokerRules:
    """Pause, resume and rules; ``Broker`` takes these methods."""

    store: Store
    channels: dict[str, Channel]
    _expiry_wake: anyio.Event  # Broker's: wakes its expiry sweep

    def _settled(self, request: Request) -> None: ...  # Broker's

    # --- the kill switch ---------------------------------------------------------------------

    async def paused(self) -> Pause | None:
        return (await self._pause_state())[1]

    async def _pause_state(self) -> tuple[str | None, Pause | None]:
        """The stored value as read (for ``swap_state``), and the pause it holds ("": none)."""
        value = await self.store.get_state(*PAUSE_STATE)
        if not value:
            return value, None
        data = json.loads(value)
        return value, Pause(data["by"], data.get("reason", ""), data["at"])

    async def pause(self, actor: str, reason: str = "") -> Pause:
        """Pause approvals; a pause already set (by anyone, even one set at the same moment) is kept,
        and this one refused, naming it."""
        read, current = await self._pause_state()
        if current is None:
            pause = Pause(actor, reason.strip(), now())
            value = json.dumps({"by": pause.by, "reason": pause.reason, "at": pause.at})
            if await self.store.swap_state(*PAUSE_STATE, read, value):
                await self.store.record(None, "paused", actor, {"reason": pause.reason})
                return pause
            _, current = await self._pause_state()  # another pause came first: it stands
            if current is None:
                raise BrokerError("approvals were paused and resumed as this pause was made; pause again")
        raise BrokerError(f"approvals are already {current.words}")

    async def resume(self, actor: str) -> tuple[float, int]:
        """End the pause; (seconds it lasted, requests whose expiry moved back by that much). Of two
        resumes at once, one ends the pause and pushes the deadlines; the other finds it not paused.
        Ending the pause, pushing the deadlines and the ``resumed`` row are one store transaction
        (``resume_pause``): a crash never leaves approvals resumed with the deadlines not pushed."""
        read, current = await self._pause_state()
        if read is None or current is None:
            raise BrokerError("approvals are not paused")
        seconds = max(0.0, now() - current.at)
        data = {"paused_by": current.by, "reason": current.reason}
        moved = await self.store.resume_pause(read, seconds, actor, data)
        if moved is None:
            raise BrokerError("approvals are not paused")
        self._expiry_wake.set()  # this process's sweep slept through the pause
        return seconds, moved

    # --- remembered answers ------------------------------------------------------------------

    async def add_rule(
        self,
        *,
        agent: str,
        tool: str,
        arguments: Any,
        created_by: str,
        hours: float | None = None,
        uses: int | None = None,
        high_risk: bool = False,
        shown: Any = None,
        max_risk: str | None = None,
        request_id: str | None = None,
    ) -> RuleRow:
        """Keep a rule. With neither ``hours`` nor ``uses`` it lasts ``DEFAULT_HOURS``; raises
        ``BrokerError`` (the message says what is wrong) on a bad name, pattern or limit. ``shown``
        and ``max_risk`` (``rules.py``): None binds neither."""
        if not agent.strip() or not tool.strip():
            raise BrokerError("a rule needs an agent (or *) and a tool pattern")
        try:
            agent = check_name("agent", agent)
            tool = check_name("tool pattern", tool)
            arguments = check_pattern(arguments)
            shown = check_shown(shown)
            max_risk = check_max_risk(max_risk, high_risk)
        except ValueError as exc:
            raise BrokerError(str(exc)) from None
        if hours is not None and not 0 < hours <= 24 * 366:
            raise BrokerError("a rule's expiry is between a moment and a year, in hours")
        if uses is not None and not 0 < uses <= MAX_USES:
            raise BrokerError(f"a rule's number of uses is a whole number from 1 to {MAX_USES:,}")
        if hours is None and uses is None:
            hours = DEFAULT_HOURS
        return await self.store.add_rule(
            agent=agent,
            tool=tool,
            arguments=arguments,
            high_risk=high_risk,
            shown=shown,
            max_risk=max_risk,
            created_by=created_by,
            expires_at=None if hours is None else now() + hours * 3600,
            uses_left=uses,
            request_id=request_id,
        )

    async def remember(self, request: Request, reply: Reply) -> RuleRow | None:
        """A one-tap "Approve & remember" (Slack, Telegram) that approved ``request``: keep the default
        rule for it. Never one that approves high risk (that takes the inbox's form or the CLI)."""
        if request.kind != Kind.APPROVAL or not request.approved or request.risk == "high":
            return None
        who = reply.person or reply.responder
        try:
            return await self.add_rule(
                **exactly(request), created_by=f"{who} via {reply.channel}", request_id=request.id
            )
        except BrokerError as exc:  # the approval stands; no rule can name this one (see add_rule)
            log.warning("approved %s but remembered no rule: %s", request.id, exc)
            return None

    async def rules(self, live: bool = False) -> list[RuleRow]:
        return await self.store.rules(now() if live else None)

    async def revoke_rule(self, rule_id: int, actor: str) -> RuleRow:
        rule = await self.store.revoke_rule(rule_id, actor) if 0 < rule_id <= MAX_RULE_ID else None
        if rule is None:
            raise BrokerError(f"no rule with id {rule_id}")
        return rule

    # --- the gate in front of a new approval --------------------------------------------------

    async def gate(self, spec: AskSpec, rules: bool = True) -> Gate | None:
        """For an approval: the pause, or the rules that cover it (none fired yet); with ``rules``
        false (an approval that needs a quorum: one person's rule cannot stand for several), the pause
        only."""
        if spec.kind != Kind.APPROVAL:
            return None
        pause = await self.paused()
        if pause is not None or not rules:
            return pause
        at = now()
        tool, arguments = subject(spec.text, spec.title, spec.payload)
        said = words(spec.text, spec.details, spec.context)
        found = [
            r for r in await self.store.rules(at) if matches(r, spec.owner, tool, arguments, spec.risk, said)
        ]
        return Remembered(found) if found else None

    async def gated(self, request: Request, created: bool, gate: Gate) -> Request:
        """Settle the approval ``gate`` stopped: denied by the pause (a new one only), or approved by
        a rule (a new one, or the pending one it repeats)."""
        silent = silent_channels(self.channels)
        if isinstance(gate, Pause):
            if not created:
                return request
            outcome = {"approved": False, "comment": gate.words}
            settled = await self.store.close_request(
                request.id, Status.CANCELLED, "pause", outcome, expiry_outcome(request), silent
            )
        else:
            if request.status != Status.PENDING:
                return request  # a repeat of a settled request: no use spent
            fired = None
            for rule in gate.rules:
                fired = await self.store.fire_rule(rule.id, now())
                if fired is not None:
                    break
            if fired is None:
                if not created:
                    return request  # the pending one it repeats was sent to people: they answer it
                outcome = {"approved": False, "comment": RAN_OUT}
                settled = await self.store.close_request(
                    request.id, Status.CANCELLED, "rule", outcome, expiry_outcome(request), silent
                )
            else:
                settled = await self._answer_by_rule(request, fired)
        assert settled is not None
        if settled.won:
            self._settled(settled.request)
        return settled.request

    async def _answer_by_rule(self, request: Request, rule: RuleRow) -> Settled | None:
        comment = f"remembered rule {rule.id}, added by {rule.created_by}"
        reply = Reply(channel=RULE_CHANNEL, responder=f"rule {rule.id}", decision="approve", comment=comment)
        outcome = {"approved": True, "comment": comment}
        settled = await self.store.resolve(
            request.id, reply, outcome, expiry_outcome(request), silent_channels(self.channels)
        )
        if settled is not None and settled.won:
            data = {"rule": rule.id, "created_by": rule.created_by, "uses_left": rule.uses_left}
            await self.store.record(request.id, "rule_fired", f"rule {rule.id}", data)
        return settled


__all__ = ["BrokerRules", "Gate", "Pause", "Remembered"]
