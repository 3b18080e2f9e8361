"""The broker's plain views on the store: the hub channels use, and what the CLI, the web inbox and
its JSON API read. None of it changes a request's life (asking, waiting and settling are in
``broker.py``), so none of it wakes a waiter.

``Broker`` takes these methods from ``BrokerViews``; nothing outside reaches into the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from hitl_mcp.channels.base import Delivery
from hitl_mcp.core import delegation
from hitl_mcp.core.audit import AuditRow
from hitl_mcp.core.delegation import Delegation
from hitl_mcp.core.errors import NotFound
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.store import CredentialRow, DeliveryRow, History, Lease, ReplyRow, Store, StoreError

if TYPE_CHECKING:
    from hitl_mcp.core.escalation import Policy

__all__ = ["REATTACHED", "BrokerViews", "times_asked"]

#: the audit event of an ask that found its request already there (``Store.create``)
REATTACHED = "reattached"


def times_asked(audit: Iterable[AuditRow]) -> int:
    """How many times the agent asked for this request, from its audit rows: once, and once more per
    re-attach (the same question again while it waited, or the same idempotency key)."""
    return 1 + sum(1 for row in audit if row.event == REATTACHED)


class BrokerViews:
    """Reads and channel bookkeeping, on ``store`` (writes) and ``history`` (the read side)."""

    store: Store
    history: History
    policy: Policy

    async def get(self, request_id: str) -> Request | None:
        return await self.store.get(request_id)

    # --- the hub channels use ----------------------------------------------------------------

    async def open_requests(self, channel: str) -> list[tuple[Request, Delivery]]:
        return [
            (request, Delivery(ref=row.ref, detail=row.detail))
            for request, row in await self.store.open_deliveries(channel)
        ]

    async def find_by_ref(self, channel: str, ref: str) -> Request | None:
        return await self.store.find_by_ref(channel, ref)

    async def state_get(self, channel: str, key: str) -> str | None:
        return await self.store.get_state(channel, key)

    async def state_set(self, channel: str, key: str, value: str) -> None:
        await self.store.set_state(channel, key, value)

    async def first_seen(self, channel: str, external_id: str) -> bool:
        return await self.store.first_seen(channel, external_id)

    async def record(
        self, request_id: str | None, event: str, actor: str | None, data: dict[str, Any]
    ) -> None:
        await self.store.record(request_id, event, actor, data)

    async def try_lease(self, name: str) -> Lease | None:
        return await self.store.try_lease(name)

    async def live_credentials(self, kind: str) -> list[CredentialRow]:
        """The live stored credentials of ``kind``, oldest first (the webpush channel's devices)."""
        at = now()
        rows = await self.store.credentials(kind)
        live = [r for r in rows if r.revoked_at is None and (r.expires_at is None or r.expires_at > at)]
        return live[::-1]

    async def revoke_credential(self, kind: str, name: str, actor: str) -> bool:
        """Revoke one (a push subscription its push service no longer knows), audited."""
        return await self.store.revoke_credential(kind, name, actor) is not None

    async def get_or_raise(self, request_id: str) -> Request:
        request = await self.store.get(request_id)
        if request is None:
            raise NotFound(f"no request with id {request_id!r}")
        return request

    async def owned(self, request_id: str, owner: str) -> Request:
        """The request, if it belongs to ``owner``; for anyone else it does not exist (no
        "forbidden", which would confirm the id)."""
        request = await self.store.get(request_id)
        if request is None or request.owner != owner or request.kind == Kind.NOTIFICATION:
            raise NotFound(f"no question or approval with id {request_id!r}")
        return request

    # --- for people's tools (the CLI): what is not a request's life ---------------------------

    async def end_sessions(self) -> int:
        """Sign every inbox session out (``hitl-mcp logout --all``); how many there were."""
        return await self.store.end_sessions()

    # --- what the web inbox and JSON API read (web/ never reaches into the store) ------------------

    async def list_requests(
        self, status: Status | None = None, limit: int = 100, before: str | None = None
    ) -> list[Request]:
        """Newest first, ``limit`` at most, after the request ``before`` (keyset paging)."""
        return await self.history.list(status, limit, before)

    async def count_requests(self, status: Status | None = None, before: str | None = None) -> int:
        return await self.history.count(status, before)

    async def delegations_now(self) -> list[Delegation]:
        """The delegations active now: the config's (``policy.delegations``), then the run-time ones."""
        at = now()
        every = [*self.policy.delegations, *await delegation.stored(self.store)]
        return [d for d in every if d.is_active(at)]

    def people(self) -> list[str]:
        """The configured people (``people:``), in config order."""
        return list(self.policy.people)

    async def set_delegation(
        self, person: str, to: str, until: str, from_time: str | None, actor: str
    ) -> Delegation:
        """Set ``person``'s run-time delegation (the inbox's Away form), checked against the config's
        people and delegations as ``hitl-mcp delegate`` is: ``delegation.put``, which raises
        ``ValueError`` (or its ``Refused``) with what is wrong."""
        return await delegation.put(
            self.store,
            person,
            to,
            until,
            from_time,
            people=self.policy.people,
            configured=self.policy.delegations,
            actor=actor,
            at=now(),
        )

    async def end_delegation(self, person: str, actor: str) -> list[Delegation]:
        """End ``person``'s run-time delegation (the inbox's "End"); the ones ended."""
        return await delegation.end(self.store, person, actor, now())

    async def store_answers(self) -> None:
        """A cheap read that raises when the store cannot answer, or when this process would miss
        other processes' changes (``/healthz``)."""
        await self.store.last_seq()
        problem = self.store.listener_problem()
        if problem is not None:
            raise StoreError(problem)

    async def undelivered(self, request_id: str) -> list[dict[str, str]]:
        """When every channel failed to deliver the request, why each failed; else empty."""
        rows = [d for d in await self.store.deliveries(request_id) if d.action == "deliver"]
        if rows and all(d.status == "failed" for d in rows):
            return [{"channel": d.channel, "error": d.error or "failed"} for d in rows]
        return []

    async def deliveries(self, request_id: str) -> list[DeliveryRow]:
        return await self.history.deliveries(request_id)

    async def replies(self, request_id: str) -> list[ReplyRow]:
        return await self.history.replies(request_id)

    async def audit(self, request_id: str) -> list[AuditRow]:
        return await self.history.audit(request_id)

    async def times_asked(self, request_ids: list[str]) -> dict[str, int]:
        """The inbox's "asked 3 times", for a page of requests in one read: once, and once more per
        re-attach (``times_asked`` counts the same from one request's audit rows)."""
        repeats = await self.history.count_events(REATTACHED, request_ids)
        return {request_id: 1 + repeats.get(request_id, 0) for request_id in request_ids}

    async def add_session(
        self, digest: str, expires_at: float, replaces: str | None = None, person: str | None = None
    ) -> None:
        await self.store.add_session(digest, expires_at, replaces, person)

    async def session_holder(self, digest: str) -> str | None:
        """The person a live session is theirs ("" for the operator), or None."""
        return await self.store.session_holder(digest)

    async def session_alive(self, digest: str) -> bool:
        return await self.store.session_alive(digest)
