"""``hitl-mcp audit verify`` and ``audit head``: the audit log against itself, the requests table and
the anchors kept outside the database (see anchor.py and docs/security-audit.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from hitl_mcp.core.audit import SETTLING_EVENTS, verify
from hitl_mcp.core.audit_replay import check_requests
from hitl_mcp.core.models import Request, iso
from hitl_mcp.core.store import History
from hitl_mcp.kit.terminal import visible
from hitl_mcp.store.anchor import Anchor, check_anchors, last_line, read_anchors

#: how many times the requests are read again when the chain moved while they were read
READS = 5


async def audit_verify(history: History, anchor_file: Path) -> int:
    """Print one line per problem found (stderr), or one line saying what was checked; 1 on a problem."""
    requests, upto = await _requests_at_one_point(history)
    rows = await history.audit()
    problems: list[str] = []
    chain = verify(rows)
    if not chain.ok:
        problems.append(f"audit log BROKEN at row {chain.bad_seq}: {chain.reason}")
    if upto is None:
        problems.append(
            f"the requests changed each of the {READS} times they were read (a busy server): "
            "not compared with the audit log; run audit verify again"
        )
    else:  # the rows a server wrote since the requests were read are not in what was read
        problems += check_requests(requests, [row for row in rows if row.seq <= upto])
    anchors, unreadable = _anchors(anchor_file)
    problems += unreadable
    if anchors:
        problems += check_anchors(anchors, {row.seq: row.hash for row in rows})
    settled = sum(r.status.value in SETTLING_EVENTS for r in requests)
    if not anchors and settled:
        problems.append(
            f"audit log NOT ANCHORED: {settled} requests have settled but {anchor_file} holds no anchor "
            "(removed, or the database predates anchors: the next settle starts them), so dropped or "
            "rewritten rows cannot be detected"
        )
    for problem in problems:
        print(visible(problem, newlines=False), file=sys.stderr)
    if problems:
        return 1
    anchored = max((a.seq for a in anchors), default=0)
    print(
        f"audit log intact: {len(rows)} rows, {len(requests)} requests match it"
        + (f", anchored up to row {anchored} ({len(anchors)} anchors in {anchor_file})" if anchors else "")
    )
    return 0


async def audit_head(history: History, anchor_file: Path) -> int:
    head = await history.audit_head()
    print(f"database: row {head[0]} {head[1]}" if head else "database: no audit rows yet")
    line = last_line(anchor_file)
    if line is None:
        print(f"anchor:   none yet ({anchor_file})")
        return 0
    anchors, _ = read_anchors([line])
    if not anchors:
        print(f"anchor:   unreadable last line in {anchor_file}: {visible(line[:100], newlines=False)}")
        return 1
    a = anchors[0]
    print(f"anchor:   row {a.seq} {a.hash} at {iso(a.at)} (last line of {anchor_file})")
    return 0


async def _requests_at_one_point(history: History) -> tuple[list[Request], int | None]:
    """The requests as the chain stood at one row, and that row's seq (None: they kept changing).

    A running server may write between two reads. Every write to a request appends its audit row in
    the same transaction, in the chain's order, so when the chain's head is the same before and after
    the requests are read, they are exactly what the rows up to it made them."""
    requests: list[Request] = []
    for _ in range(READS):
        before = await history.audit_head()
        requests = await history.all_requests()
        if await history.audit_head() == before:
            return requests, before[0] if before else 0
    return requests, None


def _anchors(path: Path) -> tuple[list[Anchor], list[str]]:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            return read_anchors(fh)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"cannot read the anchors in {path}: {exc.strerror or exc}"]
