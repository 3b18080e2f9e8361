"""What happened after a decision: an agent's ``report_outcome``, the proxy's forward, a hook's
``PostToolUse``. Recorded once per request as an ``outcome_reported`` audit row with a second signed
receipt linked to the decision's. An approval that was not approved but is reported as executed is
flagged, in the row, the receipt and the log: loudly.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, OutcomeStatus, ReportedOutcome, Request, iso, now
from hitl_mcp.core.receipts import OUTCOME, decision
from hitl_mcp.core.records import KeyConflict
from hitl_mcp.core.store import History, Store
from hitl_mcp.kit import jws

log = logging.getLogger("hitl_mcp.broker")

NOT_APPROVED = "executed without an approval"


def flag(request: Request, status: OutcomeStatus) -> str | None:
    """Why this outcome does not fit its decision, if it does not."""
    if request.kind == Kind.APPROVAL and request.approved is not True and status == "executed":
        return NOT_APPROVED
    return None


async def record(
    store: Store,
    history: History,
    request: Request,
    status: OutcomeStatus,
    summary: str | None,
    result_sha256: str | None,
    actor: str,
) -> ReportedOutcome:
    """Record it; ``BrokerError`` for a request still pending or one already reported."""
    if request.is_open:
        raise BrokerError("the request is still pending: report what happened once it is settled")
    flagged = flag(request, status)
    report = {
        "status": status,
        "summary": summary,
        "result_sha256": result_sha256,
        "reported_by": actor,
        "flagged": flagged,
    }
    try:
        done = await store.report_outcome(request.id, report, actor)
    except KeyConflict:
        return await _again(history, request, report)
    if done is None:
        raise BrokerError(f"no question or approval with id {request.id!r}")
    if flagged:
        log.warning("hitl-mcp: request %s was reported %s by %s: %s", request.id, status, actor, flagged)
    _, receipt = done
    return ReportedOutcome(
        request_id=request.id,
        decision=decision(request),
        status=status,
        summary=summary,
        result_sha256=result_sha256,
        flagged=flagged,
        receipt=receipt.token if receipt else None,
        decision_receipt=request.receipt,
        reported_at=iso(now()) or "",
    )


async def _again(history: History, request: Request, report: dict[str, Any]) -> ReportedOutcome:
    """A report made before: the same one again (a retry) gets what the first got; another one is
    refused (an outcome is reported once)."""
    for row in await history.receipts(request.id):
        if row.kind != OUTCOME:
            continue
        kept = json.loads(jws.parse(row.token)[1])["extensions"]["hitl"]
        said = {key: kept.get(key) for key in ("status", "summary", "result_sha256")}
        if said != {key: report[key] for key in said}:
            raise BrokerError(f"the outcome of {request.id} was reported already, as {kept.get('status')}")
        return ReportedOutcome(
            request_id=request.id,
            decision=kept["decision"],
            status=kept["status"],
            summary=kept.get("summary"),
            result_sha256=kept.get("result_sha256"),
            flagged=kept.get("flagged"),
            receipt=row.token,
            decision_receipt=request.receipt,
            reported_at=iso(row.created_at) or "",
        )
    raise BrokerError(f"the outcome of {request.id} was reported already")


class BrokerReports:
    """The broker's side of it: ``Broker.report_outcome``."""

    store: Store
    history: History

    async def report_outcome(
        self, request: Request, status: OutcomeStatus, summary: str | None, result: str | None, actor: str
    ) -> ReportedOutcome:
        """What happened after the decision, with its own receipt."""
        return await record(self.store, self.history, request, status, summary, result, actor)
