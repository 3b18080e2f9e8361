"""The audit log against someone who can write the database: the chain's head is anchored outside it
(audit.anchor, syslog, a URL), and `audit verify` also ties the requests table to the chain.

Tampering is done as an attacker would: a plain sqlite3 connection, the append-only triggers
dropped first, and, where the attack needs it, every hash after the changed row recomputed."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client

from hitl_mcp.core.audit import row_hash
from hitl_mcp.store.anchor import POST_TIMEOUT
from tests.conftest import api_client, cli, make_config, running, sc

pytestmark = pytest.mark.anyio


async def settle_some(state_dir: Path, extra: str = "") -> dict[str, str]:
    """Four requests: one answered in the inbox and one cancelled (by the server's process), one
    approved with the CLI (another process, last), one left pending."""
    async with running(state_dir, make_config(extra)) as rt, Client(rt.build_mcp()) as client:
        ids = {
            name: sc(await client.call_tool(tool, {**args, "wait_seconds": 0}))["request_id"]
            for name, tool, args in [
                ("question", "ask_user", {"question": "Which region?"}),
                ("cancelled", "ask_user", {"question": "Lunch?"}),
                ("approval", "request_approval", {"action": "Pay invoice 42", "payload": {"eur": 90}}),
                ("pending", "ask_user", {"question": "Later?"}),
            ]
        }
        async with api_client(rt) as api:
            reply = await api.post(f"/api/requests/{ids['question']}/reply", json={"text": "eu-west-1"})
            assert reply.status_code == 200, reply.text
        sc(await client.call_tool("cancel_request", {"request_id": ids["cancelled"], "reason": "moot"}))
    code, _, err = await cli(state_dir, "approve", ids["approval"])
    assert code == 0, err
    return ids


def tamper(state_dir: Path) -> sqlite3.Connection:
    db = sqlite3.connect(state_dir / "hitl.sqlite3", isolation_level=None)
    db.execute("DROP TRIGGER audit_no_update")
    db.execute("DROP TRIGGER audit_no_delete")
    return db


def rechain(db: sqlite3.Connection, start: int) -> None:
    """Recompute prev_hash and hash of every row from ``start`` on, as the chain's code would."""
    prev = db.execute("SELECT hash FROM audit WHERE seq = ?", (start - 1,)).fetchone()[0]
    rows = db.execute(
        "SELECT seq, at, request_id, event, actor, data FROM audit WHERE seq >= ? ORDER BY seq", (start,)
    ).fetchall()
    for seq, at, request_id, event, actor, data in rows:
        digest = row_hash(prev, seq, at, request_id, event, actor, json.loads(data))
        db.execute("UPDATE audit SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, digest, seq))
        prev = digest


def anchor_lines(state_dir: Path) -> list[tuple[int, str]]:
    return [(int(s), h) for _, s, h in (line.split() for line in (state_dir / "audit.anchor").open())]


async def test_anchor_is_appended_at_each_settle_by_whichever_process_settled(state_dir: Path) -> None:
    umask = os.umask(0o022)  # a usual umask: the file's mode 0600 must be the code's doing
    try:
        await settle_some(state_dir)
    finally:
        os.umask(umask)
    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    chain = dict(db.execute("SELECT seq, hash FROM audit"))
    settles = [s for (s,) in db.execute("SELECT seq FROM audit WHERE event IN ('answered', 'cancelled')")]
    anchors = anchor_lines(state_dir)
    # one line per settle (two by the server's process, one by the CLI's), each the head it committed
    assert sorted(seq for seq, _ in anchors) == sorted(settles) and len(settles) == 3
    assert all(chain[seq] == digest for seq, digest in anchors)
    assert stat.S_IMODE((state_dir / "audit.anchor").stat().st_mode) == 0o600

    code, out, err = await cli(state_dir, "audit", "head")
    assert code == 0, err
    head = max(chain)
    last = anchors[-1]
    assert f"database: row {head} {chain[head]}" in out
    assert f"anchor:   row {last[0]} {last[1]} at " in out

    code, out, err = await cli(state_dir, "audit", "verify")
    assert code == 0, err
    assert f"anchored up to row {max(settles)}" in out

    # anchors appended by several processes may land out of order: each is checked on its own
    path = state_dir / "audit.anchor"
    path.write_text("".join(reversed(path.read_text().splitlines(keepends=True))))
    code, _, err = await cli(state_dir, "audit", "verify")
    assert code == 0, err


async def test_verify_detects_the_newest_rows_dropped(state_dir: Path) -> None:
    ids = await settle_some(state_dir)
    db = tamper(state_dir)
    # hide that the approval was given: drop its 'answered' row and everything after it, and put
    # the request back to pending; the chain that is left is whole, and the table agrees with it
    (answered,) = db.execute(
        "SELECT seq FROM audit WHERE request_id = ? AND event = 'answered'", (ids["approval"],)
    ).fetchone()
    head = db.execute("SELECT MAX(seq) FROM audit").fetchone()[0]
    db.execute("DELETE FROM audit WHERE seq >= ?", (answered,))
    db.execute(
        "UPDATE requests SET status = 'pending', closed_at = NULL, approved = NULL, comment = NULL,"
        " responder = NULL, channel = NULL WHERE id = ?",
        (ids["approval"],),
    )
    db.execute("DELETE FROM replies WHERE request_id = ?", (ids["approval"],))
    db.close()

    code, out, err = await cli(state_dir, "audit", "verify")
    assert code == 1, out
    assert err.splitlines() == [
        f"audit log TRUNCATED: row {head} was anchored at {err.split(' anchored at ')[1].split(' ')[0]}"
        f" (anchor line 3) but the database ends at row {answered - 1}: rows {answered}..{head} were dropped"
    ]


async def test_verify_detects_a_row_rewritten_with_every_hash_after_it_recomputed(state_dir: Path) -> None:
    ids = await settle_some(state_dir)
    db = tamper(state_dir)
    seq, data = db.execute(
        "SELECT seq, data FROM audit WHERE request_id = ? AND event = 'answered'", (ids["question"],)
    ).fetchone()
    db.execute("UPDATE audit SET data = ? WHERE seq = ?", (data.replace("eu-west-1", "us-east-1"), seq))
    db.execute("UPDATE requests SET answer = 'us-east-1' WHERE id = ?", (ids["question"],))
    rechain(db, seq)
    db.close()

    code, out, err = await cli(state_dir, "audit", "verify")
    assert code == 1, out
    (line,) = err.splitlines()  # the chain and the table agree with each other: only the anchor tells
    assert line.startswith(f"audit log REWRITTEN: row {seq} no longer has the hash anchored at ")
    assert line.endswith(f"(anchor line 1): a row in 1..{seq} was changed since")

    # without the anchor file, verify says it cannot tell instead of calling the log intact
    (state_dir / "audit.anchor").unlink()
    code, _, err = await cli(state_dir, "audit", "verify")
    assert code == 1 and err.startswith("audit log NOT ANCHORED: 3 requests have settled")


async def test_verify_checks_each_settled_request_against_its_audit_rows(state_dir: Path) -> None:
    ids = await settle_some(state_dir)
    db = tamper(state_dir)
    settled_by = dict(
        db.execute("SELECT request_id, seq FROM audit WHERE event IN ('answered', 'cancelled')").fetchall()
    )
    db.execute("UPDATE requests SET approved = 0 WHERE id = ?", (ids["approval"],))
    db.execute("UPDATE requests SET responder = 'mallory' WHERE id = ?", (ids["question"],))
    db.execute("UPDATE requests SET status = 'pending', closed_at = NULL WHERE id = ?", (ids["cancelled"],))
    db.execute("UPDATE requests SET status = 'answered', answer = 'yes' WHERE id = ?", (ids["pending"],))
    db.close()
    code, out, err = await cli(state_dir, "audit", "verify")
    assert code == 1, out
    problems = {
        "approval": f"its approved differs from row {settled_by[ids['approval']]} ('answered')",
        "question": f"its responder differs from row {settled_by[ids['question']]} ('answered')",
        "cancelled": f"its status differs from row {settled_by[ids['cancelled']]} ('cancelled')",
        "pending": "it is answered but no audit row settled it",
    }
    expected = [f"request {ids[name]} does not match the audit log: {p}" for name, p in problems.items()]
    assert sorted(err.splitlines()) == sorted(expected), err


class Receiver(BaseHTTPRequestHandler):
    posts: list[dict[str, Any]]
    hold: threading.Event
    received: threading.Event

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.posts.append(body)
        self.received.set()
        self.hold.wait(30)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[Receiver]]]:
    handler = type("R", (Receiver,), {"posts": [], "hold": threading.Event(), "received": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/anchor", handler
    finally:
        handler.hold.set()
        server.shutdown()
        server.server_close()


async def test_anchor_goes_to_a_url_and_syslog_without_holding_up_a_settle(
    tmp_path: Path, state_dir: Path, receiver: tuple[str, type[Receiver]]
) -> None:
    url, handler = receiver
    log_path = tmp_path / "log.sock"
    syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    syslog.bind(str(log_path))
    extra = f"server:\n  audit_anchor: {{url: '{url}', syslog: '{log_path}'}}\n"
    async with running(state_dir, make_config(extra)) as rt, Client(rt.build_mcp()) as client:
        rid = sc(await client.call_tool("ask_user", {"question": "Ship?", "wait_seconds": 0}))["request_id"]
        async with api_client(rt) as api:
            # the receiver holds the POST open until after the reply is recorded; a settle that
            # waited for the POST would be held until the POST's own timeout
            with anyio.fail_after(POST_TIMEOUT - 1):
                reply = await api.post(f"/api/requests/{rid}/reply", json={"text": "yes"})
            assert reply.status_code == 200
        await anyio.to_thread.run_sync(handler.received.wait, 10)
        assert not handler.hold.is_set()
        handler.hold.set()
    (anchor,) = anchor_lines(state_dir)
    (post,) = handler.posts
    assert (post["seq"], post["hash"]) == anchor and post["source"].endswith(str(state_dir))
    syslog.settimeout(10)
    message = syslog.recv(4096).decode()
    assert message.startswith("<37>hitl-mcp[") and message.endswith(f" {anchor[0]} {anchor[1]}")

    # a copy of the anchors taken from syslog checks the chain as well as the file does
    copy = tmp_path / "from-syslog"
    copy.write_text(message + "\n")
    (state_dir / "audit.anchor").unlink()
    code, _, err = await cli(state_dir, "audit", "verify", "--anchor", str(copy))
    assert code == 0, err
    db = tamper(state_dir)
    db.execute("DELETE FROM audit WHERE seq = (SELECT MAX(seq) FROM audit)")
    db.close()
    code, _, err = await cli(state_dir, "audit", "verify", "--anchor", str(copy))
    assert code == 1 and "audit log TRUNCATED" in err
    syslog.close()


async def test_an_unreachable_anchor_url_never_fails_a_settle(tmp_path: Path, state_dir: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "hitl.yaml"
    config.write_text(f"server:\n  audit_anchor: {{url: 'http://127.0.0.1:{port}/a?key=s3cret'}}\n")
    async with running(state_dir) as rt, Client(rt.build_mcp()) as client:
        rid = sc(await client.call_tool("request_approval", {"action": "Go", "wait_seconds": 0}))[
            "request_id"
        ]
    code, out, err = await cli(state_dir, "approve", rid, "--config", str(config))
    assert code == 0 and out == f"{rid}: approved\n", err
    assert err.splitlines() == [
        "hitl-mcp: audit anchor not sent to server.audit_anchor.url: [Errno 111] Connection refused"
        " (the anchor file still has it)"
    ]
    assert len(anchor_lines(state_dir)) == 1
