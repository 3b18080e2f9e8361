"""``hitl-mcp audit verify`` and ``audit head``: the audit log against itself, the requests table and
the anchors kept outside the database (see anchor.py and docs/security-audit.md). The log may be
several chains (one per PostgreSQL process, core/audit.py): each is checked, with its own anchors."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from hitl_mcp.core.audit import SETTLING_EVENTS, AuditRow, label, verify
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
        problems.append(f"audit log BROKEN at row {label(chain.chain, chain.bad_seq or 0)}: {chain.reason}")
    if upto is None:
        problems.append(
            f"the requests changed each of the {READS} times they were read (a busy server): "
            "not compared with the audit log; run audit verify again"
        )
    else:  # the rows a server wrote since the requests were read are not in what was read
        problems += check_requests(requests, [row for row in rows if row.seq <= upto.get(row.chain, 0)])
    anchors, unreadable = _anchors(anchor_file)
    problems += unreadable
    if anchors:
        problems += check_anchors(anchors, {(row.chain, row.seq): row.hash for row in rows})
    settled = sum(r.status.value in SETTLING_EVENTS for r in requests)
    if not anchors and settled:
        problems.append(
            f"audit log NOT ANCHORED: {settled} requests have settled but {anchor_file} holds no anchor "
            "(removed, or the database predates anchors: the next settle starts them), so dropped or "
            "rewritten rows cannot be detected"
        )
    if anchors:
        problems += _unanchored_chains(rows, {a.chain for a in anchors}, anchor_file)
    for problem in problems:
        print(visible(problem, newlines=False), file=sys.stderr)
    if problems:
        return 1
    chains = sorted({row.chain for row in rows})
    anchored: dict[int, int] = {}
    for a in anchors:
        anchored[a.chain] = max(anchored.get(a.chain, 0), a.seq)
    heads = ", ".join(label(chain, seq) for chain, seq in sorted(anchored.items()))
    print(
        f"audit log intact: {len(rows)} rows"
        + (f" in {len(chains)} chains ({', '.join(map(str, chains))})" if len(chains) > 1 else "")
        + f", {len(requests)} requests match it"
        + (f", anchored up to row {heads} ({len(anchors)} anchors in {anchor_file})" if anchors else "")
    )
    return 0


def _unanchored_chains(rows: list[AuditRow], anchored: set[int], anchor_file: Path) -> list[str]:
    """A replica's chain (k > 0) that settled requests but has no anchor here: its anchors are in
    another replica's file (chain 0 may predate anchors: the check for no anchors at all covers it)."""
    settles = Counter(row.chain for row in rows if row.chain and row.event in SETTLING_EVENTS)
    return [
        f"audit chain {chain} NOT ANCHORED: {n} requests settled on it but {anchor_file} holds no "
        "anchor of it (each replica anchors its own chain: collect every replica's anchors), so "
        "dropped or rewritten rows of it cannot be detected"
        for chain, n in sorted(settles.items())
        if chain not in anchored
    ]


async def audit_head(history: History, anchor_file: Path) -> int:
    heads = await history.audit_heads()
    if not heads:
        print("database: no audit rows yet")
    for chain, (seq, digest) in sorted(heads.items()):
        print(f"database: row {label(chain, seq)} {digest}")
    line = last_line(anchor_file)
    if line is None:
        print(f"anchor:   none yet ({anchor_file})")
        return 0
    anchors, _ = read_anchors([line])
    if not anchors:
        print(f"anchor:   unreadable last line in {anchor_file}: {visible(line[:100], newlines=False)}")
        return 1
    a = anchors[0]
    print(f"anchor:   row {label(a.chain, a.seq)} {a.hash} at {iso(a.at)} (last line of {anchor_file})")
    return 0


async def _requests_at_one_point(history: History) -> tuple[list[Request], dict[int, int] | None]:
    """The requests as the chains stood at one point, and each chain's seq then (None: they kept
    changing).

    A running server may write between two reads. Every write to a request appends its audit row in
    the same transaction, in its chain's order, so when every chain's head is the same before and
    after the requests are read, they are exactly what the rows up to those heads made them."""
    requests: list[Request] = []
    for _ in range(READS):
        before = await history.audit_heads()
        requests = await history.all_requests()
        if await history.audit_heads() == before:
            return requests, {chain: seq for chain, (seq, _) in before.items()}
    return requests, None


def _anchors(path: Path) -> tuple[list[Anchor], list[str]]:
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            return read_anchors(fh)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"cannot read the anchors in {path}: {exc.strerror or exc}"]
