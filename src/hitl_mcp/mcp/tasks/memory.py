"""What this process knows of the tasks still working, so that a ``tasks/get`` of one (nearly every
poll) is answered without reading the store, and without the SDK's request path (``fast.py``).

An entry is made when a ``tasks/get`` read a task's row and found it plainly working: pending, not
due, delivered (or still being delivered), with no form of the host's to offer. It is dropped when
anything happens to the request, as the store's change feed tells it (``Broker.listen``: this
process's writes at once, other processes' and replicas' through ``store.changed()``), and all are
dropped when something happens to every request (a resume moves every deadline). The store stays
the truth: after a restart, or on a replica that has not seen the task yet, the first poll reads the
row, as every poll did before.

A read that races a change cannot leave a stale entry: a task is marked as being read before its
row is read, a change that arrives meanwhile marks the read stale, and a stale read makes no entry.
A change committed before the read began is in the row the read sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hitl_mcp.core.durations import format_duration
from hitl_mcp.core.models import Request, Status, iso
from hitl_mcp.mcp.tasks.status import ttl_ms

__all__ = ["TaskMemory", "Working"]

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker


@dataclass(frozen=True, slots=True)
class Working:
    """A task that was working when its row was last read, and what its answer is made of."""

    owner: str
    created_at: float
    expires_at: float | None
    via: str
    created_iso: str
    ttl_ms: int | None

    @classmethod
    def of(cls, request: Request) -> Working:
        return cls(
            owner=request.owner or "",
            created_at=request.created_at,
            expires_at=request.expires_at,
            via=", ".join(request.channels),
            created_iso=iso(request.created_at) or "",
            ttl_ms=ttl_ms(request),
        )

    def task(self, task_id: str, clock: float, poll_ms: int) -> dict[str, Any]:
        """The ``tasks/get`` answer (``status.working``, field for field)."""
        waited = format_duration(max(clock - self.created_at, 0.0))
        return {
            "taskId": task_id,
            "status": "working",
            "statusMessage": f"waiting for a reply via {self.via} — {waited}",
            "createdAt": self.created_iso,
            "lastUpdatedAt": self.created_iso,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": poll_ms,
        }


class TaskMemory:
    def __init__(self) -> None:
        self._working: dict[str, Working] = {}
        self._reading: dict[str, int] = {}
        """Task ids whose row is being read now, and by how many readers."""
        self._stale: set[str] = set()
        """Of those, the ones a change reached meanwhile: their reads make no entry."""
        self._unlisten: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._working)

    def working(self, task_id: str, owner: str, clock: float) -> Working | None:
        """The entry, if the task is known to be working and is ``owner``'s, and not yet due."""
        entry = self._working.get(task_id)
        if entry is None or entry.owner != owner:
            return None
        if entry.expires_at is not None and entry.expires_at <= clock:
            return None  # due: the store expires it (a read does)
        return entry

    def reading(self, task_id: str) -> None:
        """A read of the task's row begins (``read`` ends it, always)."""
        self._reading[task_id] = self._reading.get(task_id, 0) + 1

    def read(self, task_id: str, request: Request | None) -> None:
        """The read ended: ``request`` is the row, when it was plainly working (else None)."""
        left = self._reading.get(task_id, 1) - 1
        if left > 0:
            self._reading[task_id] = left
        else:
            self._reading.pop(task_id, None)
        stale = task_id in self._stale
        if left <= 0:
            self._stale.discard(task_id)
        if stale or request is None or request.status != Status.PENDING:
            return
        self._working[task_id] = Working.of(request)

    def watch(self, broker: Broker) -> None:
        """Follow the broker's change feed, once."""
        if self._unlisten is None:
            self._unlisten = broker.listen(self.changed, unattached=True)

    def changed(self, request_id: str, event: str) -> None:
        """Anything at all happened to the request ("": to every request)."""
        if not request_id:
            self._working.clear()
            self._stale.update(self._reading)
            return
        self._working.pop(request_id, None)
        if request_id in self._reading:
            self._stale.add(request_id)

    def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self._working.clear()
