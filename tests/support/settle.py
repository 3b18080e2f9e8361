"""Settling a request straight through the store, as the broker does (``Broker.resolve`` and
``Broker.close``): the store is told the expiry outcome (``outcomes.expiry_outcome``) and which
channels are silent (``outbox.silent_channels``); tests with no broker have no silent channels."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hitl_mcp.core.audit import Verdict, verify
from hitl_mcp.core.models import Reply, Status
from hitl_mcp.core.outcomes import expiry_outcome
from hitl_mcp.core.store import Engine, History, Settled


async def _expired(store: Engine, request_id: str) -> dict[str, Any]:
    request = await store.get(request_id)
    return {} if request is None else expiry_outcome(request)


async def resolve(
    store: Engine, request_id: str, reply: Reply, outcome: dict[str, Any], *, silent: Collection[str] = ()
) -> Settled | None:
    expired = await _expired(store, request_id)
    return await store.resolve(request_id, reply, outcome, expired, silent)


async def close_request(
    store: Engine,
    request_id: str,
    status: Status,
    actor: str,
    outcome: dict[str, Any],
    *,
    silent: Collection[str] = (),
) -> Settled | None:
    expired = await _expired(store, request_id)
    return await store.close_request(request_id, status, actor, outcome, expired, silent)


async def verify_audit(history: History) -> Verdict:
    """The whole audit chain checked, as ``hitl-mcp audit verify`` does."""
    return verify(await history.audit())
