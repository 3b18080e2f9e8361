"""What happened after a hook's approved call: ``PostToolUse`` (and Claude Code's
``PostToolUseFailure``) recorded as the approval's outcome, through the server's ``report_outcome``
(an audit row and a second receipt, linked to the decision's: docs/receipts.md).

The ``PreToolUse`` hook that got a person's approval leaves a note in the state directory: the
request's id under a name made from the host and its tool call id (``remember``). The after hook
finds it by the same tool call id (``recall``, which removes it) and reports; a call with no note
(allowed by the policy, never asked, or asked elsewhere) records nothing. The after hook never blocks
anything: whatever fails, it says so on stderr and exits 0.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import anyio

from hitl_mcp.core.models import payload_sha256
from hitl_mcp.gate.hook import Server, connected, first_line
from hitl_mcp.gate.hooks import FAILED, HookCall

#: where the notes are kept, in the state directory
NOTES = "hook-calls"
#: a note older than this is of a call that never ran: dropped when another is written
STALE = 86400.0
#: the most the report may take
REPORT_SECONDS = 10.0


def _note(state_dir: Path, host: str, call_id: str) -> Path:
    return state_dir / NOTES / hashlib.sha256(f"{host}:{call_id}".encode()).hexdigest()[:32]


def remember(state_dir: Path, host: str, call: HookCall, request_id: str) -> None:
    """After an approval: the request's id, for the after hook of the same tool call."""
    if not call.call_id:
        return
    folder = state_dir / NOTES
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if time.time() - old.stat().st_mtime > STALE:
            old.unlink(missing_ok=True)
    _note(state_dir, host, call.call_id).write_text(request_id)


def recall(state_dir: Path, host: str, call: HookCall) -> str | None:
    """The request the call was approved by, if a person approved it here; the note is removed."""
    if not call.call_id:
        return None
    note = _note(state_dir, host, call.call_id)
    try:
        request_id = note.read_text().strip()
    except OSError:
        return None
    note.unlink(missing_ok=True)
    return request_id or None


def outcome_of(call: HookCall) -> dict[str, Any]:
    """``report_outcome``'s arguments for what the tool did: ``executed`` with the SHA-256 of its
    response (canonical JSON), or ``failed`` with the error."""
    if call.event in FAILED:
        error = call.response if isinstance(call.response, str) else json.dumps(call.response)
        return {"status": "failed", "summary": f"{call.tool} failed: {error}"[:4000]}
    digest = payload_sha256(call.response)
    return {"status": "executed", "summary": f"{call.tool} ran", "result_sha256": digest}


async def report(server: Server, host: str, request_id: str, fields: dict[str, Any]) -> None:
    """Call ``report_outcome`` on the server; raises with one line on any failure."""
    with anyio.fail_after(REPORT_SECONDS):
        async with connected(server, host, REPORT_SECONDS) as client:
            result = await client.call_tool("report_outcome", {"request_id": request_id, **fields})
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise RuntimeError(f"the server refused the outcome: {text.strip()[:300]}")


def record_after(server: Server | None, state_dir: Path, host: str, call: HookCall) -> str | None:
    """Report the outcome of an approved call; None when done or nothing to do, else why not."""
    request_id = recall(state_dir, host, call)
    if request_id is None:
        return None
    if server is None:
        return f"the outcome of {request_id} is not recorded: no hitl-mcp server is configured"
    try:
        anyio.run(report, server, host, request_id, outcome_of(call))
    except Exception as exc:
        return f"the outcome of {request_id} is not recorded: {first_line(exc)}"
    return None


__all__ = ["outcome_of", "recall", "record_after", "remember"]
