"""The proxy's approvals: asking (or re-attaching), and the rule that one approval forwards one call,
kept in the store so that it holds across proxy processes.

- **Re-attach.** The proxy asks with a session key of its own that is the same in every process (the
  upstream's name), so the broker's dedupe finds a pending ask of the same principal, tool and
  arguments: a host that restarts the proxy and calls again waits for the same approval. An approval
  that came while no process waited is found through ``open:<digest>`` in the store (the last
  request asked for that principal, upstream and payload) and forwards the next such call, until the
  request would have expired; a refused, expired or used one makes the call ask anew.
- **One forward.** ``forward:<request id>`` is claimed by one conditional write before the upstream is
  called; whoever loses the claim does not call it. The claim then records how it ended (``done``,
  with the result for a task to read after a restart; ``cancelled``: the host cancelled the task
  before the call).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mcp_types import CreateMessageRequestParams

from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, Request, Status, now, payload_sha256
from hitl_mcp.core.store import StoreError

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker
    from hitl_mcp.gate.policy import Policy

#: the channel-state namespace the proxy keeps its claims and open asks in
STATE = "proxy"
#: how long the upstream's sampling request waits for a person's approval (under its own 60 s)
SAMPLING_WAIT = 50.0

ClaimState = Literal["running", "done", "cancelled"]


def gate_payload(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the person approves, and what is hashed: the exact tool name and arguments."""
    return {"tool": tool, "arguments": arguments}


def approved_arguments(request: Request, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments to forward for an approved ``request``: the ones stored in it, provided they
    still hash to what the person approved and are the ones this call carries. Raises ValueError."""
    stored = request.payload
    if payload_sha256(stored) != request.payload_sha256:
        raise ValueError("the stored payload no longer matches the hash the person approved")
    if payload_sha256(gate_payload(tool, arguments)) != request.payload_sha256:
        raise ValueError("this call's tool or arguments differ from the approved payload")
    if not isinstance(stored, dict) or not isinstance(stored.get("arguments"), dict):
        raise ValueError("the approved payload has no arguments")
    return dict(stored["arguments"])


def answered_on(request: Request) -> list[str]:
    """The channels the approval was given on: the winning answer's, and every counted vote's."""
    return [c for c in [request.channel, *(v.channel for v in request.votes)] if c]


def why_not(request: Request) -> str:
    """The tool error for an approval that did not come."""
    if request.status == Status.EXPIRED:
        return "not approved: the approval request expired before anyone answered; the tool was not called"
    if request.status == Status.CANCELLED:
        because = f" ({request.comment})" if request.comment else ""  # e.g. paused by alice: freeze
        return f"not approved: the approval request was cancelled{because}; the tool was not called"
    who = request.responder or "the person"
    because = f": {request.comment}" if request.comment else ""
    return f"denied by {who}{because}"


@dataclass(frozen=True)
class Claim:
    state: ClaimState
    by: str
    at: float
    result: dict[str, Any] | None = None


def _key(request_id: str) -> str:
    return f"forward:{request_id}"  # ends in the request id: pruned with the request's other state


def _open_key(spec: AskSpec, upstream: str) -> str:
    material = json.dumps([spec.owner, upstream, payload_sha256(spec.payload)])
    return "open:" + hashlib.sha256(material.encode()).hexdigest()[:40]


async def claim_of(broker: Broker, request_id: str) -> Claim | None:
    raw = await broker.state_get(STATE, _key(request_id))
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return Claim(data["state"], str(data["by"]), float(data["at"]), data.get("result"))
    except (ValueError, KeyError, TypeError):
        return Claim("done", "?", 0.0)  # unreadable: never forwarded again


async def claim(broker: Broker, request_id: str, by: str, state: ClaimState = "running") -> bool:
    """Take the request's one forward (or, ``cancelled``, make sure nobody does); True if this did."""
    value = json.dumps({"state": state, "by": by, "at": now()})
    return await broker.store.swap_state(STATE, _key(request_id), None, value)


async def finished(broker: Broker, request_id: str, by: str, result: dict[str, Any] | None) -> None:
    """Record how the forward ended (the result: for a task read after a restart)."""
    value = {"state": "done", "by": by, "at": now(), **({"result": result} if result is not None else {})}
    await broker.state_set(STATE, _key(request_id), json.dumps(value))


async def report(broker: Broker, request: Request, result: dict[str, Any], cancelled: bool, by: str) -> None:
    """The approval's outcome, as ``report_outcome`` records it (an audit row and a receipt linked to
    the decision's): ``executed`` with the result's SHA-256 when the upstream answered, ``failed``
    with its error when it refused, or when the call was cancelled while the upstream ran."""
    text = " ".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))[:300]
    failed = cancelled or bool(result.get("isError"))
    tool = request.payload.get("tool") if isinstance(request.payload, dict) else None
    summary = f"{by} called {tool}: {text if failed else 'the upstream answered'}"
    digest = payload_sha256(result)  # the canonical JSON's, as a payload's
    await broker.report_outcome(request, "failed" if failed else "executed", summary, digest, by)


async def ask(broker: Broker, spec: AskSpec, upstream: str) -> tuple[Request, bool]:
    """The request for this call: an approval not yet used for the same principal, upstream and
    payload, else a pending one (the broker's dedupe), else a new one; and whether it is new."""
    key = _open_key(spec, upstream)
    known = await broker.state_get(STATE, key)
    if known:
        request = await broker.get(known)
        if request is not None and await _usable(broker, request):
            return request, False
    request, created = await broker.ask(spec)
    if request.id != known:
        await broker.state_set(STATE, key, request.id)
    return request, created


async def _usable(broker: Broker, request: Request) -> bool:
    if request.status == Status.PENDING:
        return True
    if request.status != Status.ANSWERED or request.approved is not True:
        return False
    if request.expires_at is not None and request.expires_at <= now():
        return False  # an approval not used in its own time is not used later
    return await claim_of(broker, request.id) is None


async def sampling_approved(
    broker: Broker,
    upstream: str,
    policy: Policy,
    session_key: str | None,
    params: CreateMessageRequestParams,
    owner: str,
) -> str | None:
    """``sampling: ask``: a person approves the upstream's use of the host's model, for the call
    (``owner``'s) it came during. None: approved; else why not."""
    spec = AskSpec(
        kind=Kind.APPROVAL,
        text=f"Let {upstream} use the host's model",
        details="The upstream asks the agent's host to generate a message (MCP sampling), through "
        "hitl-mcp proxy. The payload is its request.",
        payload={"sampling": params.model_dump(by_alias=True, mode="json", exclude_none=True)},
        risk=policy.risk,
        channels=policy.channels,
        session_key=session_key,
        owner=owner,
        forms=False,
    )
    try:
        request, _ = await broker.ask(spec)
        request = await broker.wait(request.id, SAMPLING_WAIT)
    except (BrokerError, StoreError) as exc:
        return f"sampling not approved: the approval could not be asked ({exc})"
    if request.status == Status.PENDING:
        return f"sampling not approved within {SAMPLING_WAIT:g} s (request {request.id})"
    if request.approved is not True:
        return f"sampling {why_not(request)}"
    return None


__all__ = [
    "STATE",
    "Claim",
    "answered_on",
    "approved_arguments",
    "ask",
    "claim",
    "claim_of",
    "finished",
    "gate_payload",
    "sampling_approved",
    "why_not",
]
