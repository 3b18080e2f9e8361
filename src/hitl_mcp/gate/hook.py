"""``hitl-mcp hook <host>``: a host's permission hook, answered by a person through a running server.

It reads one hook event on stdin, decides it by the policy file (``policy.py``), and for ``ask``
asks through a running ``hitl-mcp serve --transport http``: as an MCP client of its ``/mcp``
endpoint, with the web token, calling ``request_approval`` (payload: the tool and its arguments;
idempotency key: the host's tool call id) and then ``wait_for_response`` until the deadline. It
never opens the database. It prints the decision in the host's format (``hooks/``).

Fail closed: no server, no token, an error, or no answer before ``--timeout`` is a deny, or (with
``--on-failure ask``) the host's own prompt. Only an approval the person gave is an allow. The
decision is printed within ``--timeout`` plus about a second whatever the server does (a watchdog
thread prints it and ends the process): a host treats a hook it had to kill as a non-blocking error,
and runs the tool. Any unexpected error is a deny too; the exit code is never 1 (which hosts take as
"go ahead").

It asks as the agent its token names (``$HITL_AGENT_TOKEN``, from ``hitl-mcp agent add``), else as
the operator (the web token, found as the server finds it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from hitl_mcp.gate.hooks import HookCall, Verdict
from hitl_mcp.gate.policy import Decision, Policy
from hitl_mcp.gate.previews import preview_for

if TYPE_CHECKING:
    from mcp import Client

#: the most stdin a hook event may take (a large Write's content fits)
MAX_EVENT = 8 * 1024 * 1024
#: each wait_for_response at most this long, so a heartbeat-less wait never outlives the deadline much
WAIT_STEP = 20.0
MODULES = {"claude-code": "claude_code", "codex": "codex", "gemini-cli": "gemini_cli"}
#: how long past ``--timeout`` the decision may take, whatever the server does
GRACE = 1.0


@dataclass(frozen=True)
class Server:
    url: str
    token: str | None
    state_dir: Path | None = None
    """The state directory of the config, as found here: where an approved call's note is left for
    the after hook (``outcome.py``)."""


class Unanswered(Exception):
    """Why the person's answer is not known: one line, in the failure's reason."""


async def ask_person(
    server: Server, call: HookCall, decision: Decision, host: str, seconds: float
) -> tuple[bool, str, str]:
    """Ask through the server and wait; (approved, the reason to show, the request's id). Raises
    ``Unanswered``."""
    payload = {"tool": call.tool, "arguments": call.arguments}
    arguments: dict[str, Any] = {
        "action": decision.description,
        "details": f"{host} wants to run the tool `{call.tool}`"
        + (f" in {call.cwd}" if call.cwd else "")
        + ".",
        "payload": payload,
        "risk": decision.risk,
    }
    if call.call_id:
        # the host's id for this one tool call: a hook run again for it re-attaches, never re-asks. An
        # event without one (PermissionRequest, Gemini CLI) asks afresh each time: a key made from the
        # arguments would let an old approval answer the same command run again later
        arguments["idempotency_key"] = f"{host}:{call.call_id}"[:200]
    preview = preview_for(call.tool, call.arguments, call.cwd, decision.preview)
    if preview is not None:  # the diff against the file on disk, the command, the SQL
        arguments["preview"] = preview
    if decision.channels:
        arguments["channels"] = decision.channels
    if decision.to:
        arguments["to"] = decision.to
    if decision.timeout_seconds:
        arguments["timeout_seconds"] = decision.timeout_seconds
    deadline = anyio.current_time() + seconds
    try:
        with anyio.fail_after(seconds):  # the whole exchange, connecting and closing included
            outcome = await _asked(server, arguments, host, seconds, deadline)
    except TimeoutError:
        raise Unanswered(f"no answer from the person within {seconds:g} s") from None
    rid = str(outcome.get("request_id"))
    if outcome.get("approved") is True:
        return True, f"approved by {outcome.get('responder') or 'the person'} (hitl-mcp)", rid
    status = outcome.get("status")
    if status != "answered":
        because = f" ({outcome['comment']})" if status == "cancelled" and outcome.get("comment") else ""
        return False, f"not approved: the request was {status} before anyone answered{because}", rid
    comment = f": {outcome['comment']}" if outcome.get("comment") else ""
    return False, f"denied by {outcome.get('responder') or 'the person'}{comment}", rid


@asynccontextmanager
async def connected(server: Server, host: str, read: float) -> AsyncIterator[Client]:
    """An MCP session with the server's ``/mcp`` as this host's hook, with its credential; ``read``:
    how long an answer may take."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation

    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=read)) as http:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
        info = Implementation(name=f"hitl-mcp-hook-{host}", version="1")
        async with Client(transport, mode="legacy", client_info=info, read_timeout_seconds=read) as client:
            yield client


async def _asked(
    server: Server, arguments: dict[str, Any], host: str, seconds: float, deadline: float
) -> dict[str, Any]:
    """The outcome, once settled or once the deadline is near (then ``Unanswered``)."""
    try:
        async with connected(server, host, WAIT_STEP + 30) as client:
            arguments["wait_seconds"] = min(WAIT_STEP, seconds)
            outcome = _outcome(await client.call_tool("request_approval", arguments))
            while outcome.get("status") == "pending":
                left = deadline - anyio.current_time()
                if left <= 0.5:
                    raise Unanswered(f"no answer from the person within {seconds:g} s")
                wait = {"request_id": outcome["request_id"], "wait_seconds": min(WAIT_STEP, left)}
                outcome = _outcome(await client.call_tool("wait_for_response", wait))
            return outcome
    except Unanswered:
        raise
    except Exception as exc:  # any failure to reach or read the server fails closed
        raise Unanswered(f"cannot ask through hitl-mcp at {server.url}: {first_line(exc)}") from None


def _outcome(result: Any) -> dict[str, Any]:
    if result.is_error or not isinstance(result.structured_content, dict):
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise Unanswered(f"the server refused: {text.strip()[:300]}")
    return dict(result.structured_content)


def first_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return first_line(exc.exceptions[0])
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def decide(
    policy: Policy,
    call: HookCall,
    host: str,
    server: Server | None,
    timeout: float,
    on_failure: Verdict,
    approved_by: Callable[[str], None] | None = None,
) -> tuple[Verdict, str]:
    """The verdict and its reason; ``approved_by`` is told the request's id when a person approved
    (the after hook reports the outcome to it: ``outcome.py``)."""
    decision = policy.decide(call.tool, call.arguments)
    if decision.action == "allow":
        return "allow", "allowed by the hitl-mcp policy"
    if decision.action == "deny":
        return "deny", f"denied by policy: {decision.reason or 'this call is not allowed'}"
    try:
        if server is None:
            raise Unanswered("no hitl-mcp server is configured")
        approved, reason, request_id = anyio.run(ask_person, server, call, decision, host, timeout)
    except Unanswered as exc:
        return on_failure, f"hitl-mcp: {exc}"
    if approved and approved_by is not None:
        approved_by(request_id)
    return ("allow" if approved else "deny"), reason
