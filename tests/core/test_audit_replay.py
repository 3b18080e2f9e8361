"""`audit verify` ties each request's row to its audit trail: every event that legitimately changes a row
after it was created (an escalation step that adds channels, directly or through people and their
delegates; a quorum's votes; a resume pushing deadlines back; the answer, expiry or cancel) is replayed,
so an untouched log verifies intact after each of them, on both store engines; and a change no trail
event explains (channels, text, payload, votes, outcome, whom a delegate answered for, a deadline) is
still reported, naming the row it departs from.

Everything happens for real through the broker (the kit's ``TestChannel`` as the channels, steps run
through the store at a time given to ``run_due_steps``, as the outbox loop does with ``now()``); the
tampering is a raw write to the requests table, as someone with the database's credentials could make.
The ladder from the bug report runs through the config and a real ntfy channel (against the local
stand-in), then ``hitl-mcp audit verify`` as a subprocess.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.broker import broker as broker_module
from hitl_mcp.broker import outbox as outbox_module
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core import delegation
from hitl_mcp.core.audit import AuditRow, label, verify
from hitl_mcp.core.audit_replay import check_requests
from hitl_mcp.core.delegation import Delegation
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.ladders import LadderConfig
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.store import Engine
from hitl_mcp.store.rows import BODY_FIELDS, votes_json
from hitl_mcp.store.sqlite import SqliteStore
from tests.conftest import api_client, cli, make_config, running, sc
from tests.support.events import until
from tests.support.harness import channel_broker, watching
from tests.support.ntfy_standin import NtfyStandin
from tests.support.postgres import Cluster
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

PEOPLE = {
    "owner": {"push": "OWNER"},
    "backup": {"mail": "backup@example.com"},
    "lead": {"desk": "LEAD"},
    "security": {"desk": "SEC"},
    "deputy": {"sms": "+15550001111"},
}
PAYLOAD = {"command": "terraform apply", "workspace": "prod"}


@dataclass
class Database:
    """An open store of one engine, and a raw statement on its database behind the store's back."""

    store: Engine
    execute: Callable[[str, tuple[Any, ...]], Awaitable[None]]
    """One SQL statement with ``?`` placeholders, outside the store (an attacker's write)."""
    url: str | None = None
    """PostgreSQL's URL; None for SQLite (the file ``hitl.sqlite3`` in the test's tmp_path)."""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "postgres":
        import asyncpg

        from hitl_mcp.store.postgres import PostgresStore

        cluster: Cluster = request.getfixturevalue("postgres_cluster")
        url = await cluster.create_database()

        async def execute_pg(sql: str, args: tuple[Any, ...]) -> None:
            parts = sql.split("?")
            numbered = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], 1))
            conn = await asyncpg.connect(url)
            try:
                await conn.execute(numbered, *args)
            finally:
                await conn.close()

        pg = PostgresStore(url)
        await pg.open()
        try:
            yield Database(pg, execute_pg, url)
        finally:
            await pg.close()
            await cluster.drop_database(url)
        return
    path = tmp_path / "hitl.sqlite3"

    async def execute_sqlite(sql: str, args: tuple[Any, ...]) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute(sql, args)
        finally:
            conn.close()

    store = SqliteStore(path)
    await store.open()
    try:
        yield Database(store, execute_sqlite)
    finally:
        await store.close()


def channel(name: str) -> Callable[[Any], TestChannel]:
    return lambda hub: TestChannel(name, hub=hub)


def use(broker: Broker, *steps: dict[str, Any], delegations: tuple[Delegation, ...] = ()) -> None:
    """People on the channels (owner on push, backup on mail, lead and security on desk), a ladder
    named ``default`` when given steps, and the config's delegations."""
    ladders = {"default": LadderConfig.model_validate({"steps": list(steps)})} if steps else {}
    types = {name: "testing" for name in broker.channels}
    broker.policy = Policy(people=PEOPLE, ladders=ladders, types=types, delegations=delegations)


def kit_channel(broker: Broker, name: str) -> TestChannel:
    found = broker.channels[name]
    assert isinstance(found, TestChannel)
    return found


async def problems(store: Engine) -> list[str]:
    """What ``audit verify`` says of the chain and of the requests against it (no anchors here)."""
    rows = await store.audit()
    chain = verify(rows)
    assert chain.ok, chain.reason
    return check_requests(await store.all_requests(), rows)


async def seq_of(store: Engine, request_id: str | None, event: str, nth: int = -1) -> str:
    """How ``audit verify`` names the row: its seq, with its chain on a PostgreSQL process's own."""
    rows: list[AuditRow] = [r for r in await store.audit(request_id) if r.event == event]
    return label(rows[nth].chain, rows[nth].seq)


async def sent_on(broker: Broker, name: str, request_id: str) -> None:
    target = kit_channel(broker, name)
    with watching(broker, request_id) as changes:
        await until(lambda: request_id in target.sent, changes)


async def rewrite(db: Database, request_id: str, **columns: Any) -> None:
    sets = ", ".join(f"{name} = ?" for name in columns)
    await db.execute(f"UPDATE requests SET {sets} WHERE id = ?", (*columns.values(), request_id))


async def rewrite_body(db: Database, request: Request, **fields: Any) -> None:
    """Rewrite fields the row keeps in its JSON ``body`` (text, channels, payload...)."""
    body = request.model_dump(mode="json", include=set(BODY_FIELDS))
    body.update(fields)
    await rewrite(db, request.id, body=json.dumps(body))


def did_not_match(request_id: str, problem: str) -> list[str]:
    return [f"request {request_id} does not match the audit log: {problem}"]


# --- escalation steps ----------------------------------------------------------------------------


async def test_steps_that_add_channels_and_people_and_remind_verify_intact(
    db: Database, tmp_path: Path
) -> None:
    async with channel_broker(
        tmp_path, channel("push"), also=[channel("mail"), channel("desk")], store=db.store
    ) as broker:
        use(
            broker,
            {"after": 0, "notify": ["push"]},  # already asked there: adds nothing
            {"after": "1m", "notify": ["mail"]},
            {"after": "2m", "notify_people": ["lead"]},  # lead's channel: desk
            {"after": "3m", "remind": True},  # a reminder where it was sent: push
        )
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Deploy v2?"))
        assert request.channels == ["push"]
        await sent_on(broker, "push", request.id)
        ran = await broker.store.run_due_steps(request.created_at + 200)
        assert [(s.number, s.channels) for s in ran if s.number > 1] == [
            (2, ["mail"]),
            (3, ["desk"]),
            (4, ["push"]),
        ]
        assert (await broker.get_or_raise(request.id)).channels == ["push", "mail", "desk"]
        assert await problems(db.store) == []

        broker.outbox.kick()
        await sent_on(broker, "desk", request.id)
        await kit_channel(broker, "desk").reply(request.id, responder="LEAD", text="yes")
        assert (await broker.get_or_raise(request.id)).status == Status.ANSWERED
        assert await problems(db.store) == []

        # a channel dropped, and one added that no step sent it on: both are departures from the step
        settled = await broker.get_or_raise(request.id)
        step = await seq_of(db.store, request.id, "step_sent", 2)  # the notify_people step, the last to add
        for channels in (["push", "mail"], ["push", "mail", "desk", "sms"]):
            await rewrite_body(db, settled, channels=channels)
            assert await problems(db.store) == did_not_match(
                request.id, f"its channels differ from row {step} ('step_sent')"
            )
        await rewrite_body(db, settled, text="Deploy v3?")
        created = await seq_of(db.store, request.id, "created")
        assert await problems(db.store) == did_not_match(
            request.id, f"its text differs from row {created} ('created')"
        )


# --- delegation --------------------------------------------------------------------------------


async def test_delegates_set_in_the_config_and_at_run_time_verify_intact(
    db: Database, tmp_path: Path
) -> None:
    at = now()
    away = Delegation.model_validate({"from": "owner", "to": "backup", "until": at + 3600})  # the config's
    # lead is away too, set at run time as `hitl-mcp delegate lead deputy` does: the step for lead goes to sms
    await delegation.put(
        db.store,
        "lead",
        "deputy",
        at + 3600,
        people=PEOPLE,
        configured=[away],
        actor="lead (terminal)",
        at=at,
    )
    factories = [channel("mail"), channel("desk"), channel("sms")]
    async with channel_broker(tmp_path, channel("push"), also=factories, store=db.store) as broker:
        use(broker, {"after": "1m", "notify_people": ["lead"]}, delegations=(away,))
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Roll back?", to=["owner"]))
        assert request.channels == ["mail"]  # owner's delegate's
        assert [r.data for r in await db.store.audit(request.id) if r.event == "delegated"] == [
            {"person": "owner", "to": "backup"}
        ]
        (step,) = await broker.store.run_due_steps(request.created_at + 60)
        assert step.channels == ["sms"]  # lead's delegate's
        assert await problems(db.store) == []

        await kit_channel(broker, "mail").reply(request.id, responder="backup@example.com", text="no")
        answered = await broker.get_or_raise(request.id)
        assert (answered.person, answered.on_behalf_of) == ("backup", "owner")
        assert [d.from_ for d in await delegation.end(db.store, "lead", "lead (terminal)", now())] == ["lead"]
        assert await problems(db.store) == []

    seq = await seq_of(db.store, request.id, "answered")
    await rewrite(db, request.id, on_behalf_of="lead")
    assert await problems(db.store) == did_not_match(
        request.id, f"its on_behalf_of differs from row {seq} ('answered')"
    )
    await rewrite(db, request.id, on_behalf_of="owner", person="deputy")
    assert await problems(db.store) == did_not_match(
        request.id, f"its person differs from row {seq} ('answered')"
    )


# --- quorum --------------------------------------------------------------------------------------


async def test_a_quorum_s_votes_verify_intact_while_pending_and_once_settled(
    db: Database, tmp_path: Path
) -> None:
    away = Delegation.model_validate({"from": "owner", "to": "backup", "until": now() + 3600})
    factories = [channel("mail"), channel("desk")]
    async with channel_broker(tmp_path, channel("push"), also=factories, store=db.store) as broker:
        use(broker, delegations=(away,))
        quorum = Quorum.model_validate({"required": 2, "of": ["lead", "security", "owner"]})
        spec = AskSpec(kind=Kind.APPROVAL, text="Apply the prod plan", payload=PAYLOAD, approvals=quorum)
        request, _ = await broker.ask(spec)
        other, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Apply staging", approvals=quorum))
        mail, desk = kit_channel(broker, "mail"), kit_channel(broker, "desk")

        await mail.reply(
            request.id, responder="backup@example.com", decision="approve", comment=" for owner "
        )
        await desk.reply(other.id, responder="SEC", decision="approve")
        pending = await broker.get_or_raise(request.id)
        assert [(v.person, v.on_behalf_of, v.comment) for v in pending.votes] == [
            ("backup", "owner", "for owner")
        ]
        assert await problems(db.store) == []

        # a pending request's votes rewritten: backup's approval made a denial
        voted = await seq_of(db.store, request.id, "voted")
        flipped = [v.model_copy(update={"decision": "deny"}) for v in pending.votes]
        await rewrite(db, request.id, votes=votes_json(flipped))
        assert await problems(db.store) == did_not_match(
            request.id, f"its votes differ from row {voted} ('voted')"
        )
        await rewrite(db, request.id, votes=votes_json(pending.votes))

        await desk.reply(request.id, responder="LEAD", decision="approve")
        await broker.cancel(other.id, "moot", "agent")  # settled with security's vote counted
        assert (await broker.get_or_raise(request.id)).approved is True
        assert len((await broker.get_or_raise(other.id)).votes) == 1
        assert await problems(db.store) == []

    settled = await broker.get_or_raise(request.id)
    answered = await seq_of(db.store, request.id, "answered")
    await rewrite(db, request.id, votes=votes_json(settled.votes[:1]))
    assert await problems(db.store) == did_not_match(
        request.id, f"its votes differ from row {answered} ('answered')"
    )
    await rewrite(db, request.id, votes=votes_json(settled.votes))
    # the payload rewritten, its hash left as it was: not what the approvers were shown
    await rewrite_body(db, settled, payload={**PAYLOAD, "workspace": "staging"})
    created = await seq_of(db.store, request.id, "created")
    assert await problems(db.store) == did_not_match(
        request.id, f"its payload differs from row {created} ('created')"
    )


# --- the kill switch, rules, expiry ----------------------------------------------------------------


async def test_pause_resume_a_rule_and_an_expiry_verify_intact(db: Database, tmp_path: Path) -> None:
    async with channel_broker(tmp_path, channel("push"), store=db.store) as broker:
        await broker.add_rule(agent="*", tool="Rotate*", arguments=None, created_by="me", uses=1)
        by_rule, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        assert by_rule.status == Status.ANSWERED and by_rule.responder is not None
        soon, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Lunch?", timeout_seconds=0.5))
        later, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Ship it", timeout_seconds=600))
        await broker.pause("alice", "deploy freeze")
        denied, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Ship more"))
        assert denied.status == Status.CANCELLED  # by the pause, at once
        seconds, moved = await broker.resume("bob")
        assert moved >= 1
        pushed = await broker.get_or_raise(later.id)
        assert later.expires_at is not None and pushed.expires_at == later.expires_at + seconds
        assert (await broker.wait(soon.id, 10)).status == Status.EXPIRED
        assert await problems(db.store) == []

    # a deadline moved by more than the resume explains
    resumed = await seq_of(db.store, None, "resumed")
    assert pushed.expires_at is not None
    await rewrite(db, later.id, expires_at=pushed.expires_at + 3600)
    assert await problems(db.store) == did_not_match(
        later.id, f"its expires_at differs from row {resumed} ('resumed')"
    )


# --- digests -------------------------------------------------------------------------------------


async def test_notifications_held_for_a_digest_verify_intact(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = 900.0
    clock = {"at": (math.floor(time.time() / window) + 2) * window}  # the opening of a window ahead
    monkeypatch.setattr(broker_module, "now", lambda: clock["at"])
    monkeypatch.setattr(outbox_module, "now", lambda: clock["at"])
    phone = lambda hub: TestChannel("phone", hub=hub, digest=window)  # noqa: E731
    async with channel_broker(tmp_path, phone, channel("push"), store=db.store) as broker:
        held = [
            await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text=text, level="info"))
            for text in ("312 tests pass", "Deploy started")
        ]
        loud = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Disk full", level="error"))
        assert [r.digest != [] for r in held] == [True, True] and sorted(loud.delivered) == ["phone", "push"]
        clock["at"] += window
        broker.outbox.kick()
        ids = [r.request_id for r in held]
        with watching(broker) as changes:
            await until(
                lambda: len(kit_channel(broker, "phone").delivered) == 2, changes
            )  # the error, the digest
        assert await problems(db.store) == []

    # a notification is never pending: nothing in its trail makes it one
    created = await seq_of(db.store, ids[0], "created")
    await rewrite(db, ids[0], status="pending")
    assert await problems(db.store) == did_not_match(
        ids[0], f"its status differs from row {created} ('created')"
    )


# --- the ladder from the report, through the config and the CLI -------------------------------------


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_audit_verify_after_a_step_that_adds_a_channel(
    engine: str, request: pytest.FixtureRequest, state_dir: Path
) -> None:
    """The report's repro: a ladder with one ``after: 1s, notify: [other]`` step, one ask, the step
    sent, then ``hitl-mcp audit verify`` (before the answer, and after it, anchored)."""
    if engine == "sqlite":
        await ladder_then_verify(state_dir)
        return
    cluster: Cluster = request.getfixturevalue("postgres_cluster")
    url = await cluster.create_database()
    try:
        await ladder_then_verify(state_dir, url)
    finally:
        await cluster.drop_database(url)


async def ladder_then_verify(state_dir: Path, url: str | None = None) -> None:
    env = {"HITL_DATABASE_URL": url} if url else {}
    stand = NtfyStandin()
    async with serving(stand.app()) as ntfy:
        extra = f"""  other: {{type: ntfy, server: "{ntfy}", topic: hitl-audit-replay-4kQ9wT}}
escalation:
  default:
    steps:
      - {{after: 1s, notify: [other]}}
"""
        if url:
            extra += f"server:\n  store: '{url}'\n"
        async with running(state_dir, make_config(extra)) as rt, Client(rt.build_mcp()) as client:
            out = sc(await client.call_tool("ask_user", {"question": "Which region?", "wait_seconds": 0}))
            rid = out["request_id"]
            broker = await rt.broker()

            async def sent_on_other() -> bool:
                return any(
                    r.event == "delivered" and r.data["channel"] == "other"
                    for r in await broker.history.audit(rid)
                )

            with watching(broker, rid) as changes:
                await until(sent_on_other, changes)
            assert (await broker.get_or_raise(rid)).channels == ["web", "other"]
            code, said, err = await cli(state_dir, "audit", "verify", **env)
            assert (code, err) == (0, ""), err
            async with api_client(rt) as api:
                reply = await api.post(f"/api/requests/{rid}/reply", json={"text": "eu-west-1"})
                assert reply.status_code == 200, reply.text
    code, said, err = await cli(state_dir, "audit", "verify", **env)
    assert (code, err) == (0, ""), err
    assert said.startswith("audit log intact: ") and "1 requests match it, anchored up to row" in said

    # the channel the step added, dropped from the row behind the log's back
    step = await drop_channel(state_dir, url, rid, "other")
    code, said, err = await cli(state_dir, "audit", "verify", **env)
    assert code == 1, said
    assert err.splitlines() == [
        f"request {rid} does not match the audit log: its channels differ from row {step} ('step_sent')"
    ]


async def drop_channel(state_dir: Path, url: str | None, request_id: str, name: str) -> str:
    """Rewrite the request's channels without ``name``, as someone with the database could; its
    ``step_sent`` row as ``audit verify`` names it (with its chain on PostgreSQL)."""
    body_sql = "SELECT body FROM requests WHERE id = ?"
    step_sql = "SELECT seq FROM audit WHERE request_id = ? AND event = 'step_sent'"
    update_sql = "UPDATE requests SET body = ? WHERE id = ?"
    if url is None:
        conn = sqlite3.connect(state_dir / "hitl.sqlite3", isolation_level=None)
        try:
            body = json.loads(conn.execute(body_sql, (request_id,)).fetchone()[0])
            body["channels"].remove(name)
            conn.execute(update_sql, (json.dumps(body), request_id))
            return str(conn.execute(step_sql, (request_id,)).fetchone()[0])
        finally:
            conn.close()
    import asyncpg

    pg = await asyncpg.connect(url)
    try:
        body = json.loads(await pg.fetchval(body_sql.replace("?", "$1"), request_id))
        body["channels"].remove(name)
        await pg.execute(
            update_sql.replace("= ?", "= $1", 1).replace("= ?", "= $2"), json.dumps(body), request_id
        )
        row = await pg.fetchrow(
            step_sql.replace("?", "$1").replace("SELECT seq", "SELECT chain, seq"), request_id
        )
        return label(row["chain"], row["seq"])
    finally:
        await pg.close()


# --- verify beside a running server --------------------------------------------------------------


class WrittenMeanwhile:
    """The store as ``audit verify`` reads it, with a server's writes landing the first time the
    requests are read: after the audit rows were read, in the order verify used to read them."""

    def __init__(self, store: Engine, write: Callable[[], Awaitable[None]], every: bool = False) -> None:
        self.store = store
        self.write: Callable[[], Awaitable[None]] | None = write
        self.every = every
        """Each time they are read, not only the first."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def all_requests(self) -> list[Request]:
        if self.write is not None:
            write = self.write
            self.write = write if self.every else None
            await write()
        return await self.store.all_requests()


async def test_a_write_while_verify_reads_is_no_departure(
    db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hitl_mcp.cli.audit import audit_verify

    async with channel_broker(tmp_path, channel("push"), also=[channel("mail")], store=db.store) as broker:
        use(broker, {"after": "1m", "notify": ["mail"]})
        first, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which region?"))

        async def meanwhile() -> None:  # a request asked, and a step sent on another
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="Lunch?"))
            assert [s.channels for s in await broker.store.run_due_steps(first.created_at + 60)] == [["mail"]]

        code = await audit_verify(WrittenMeanwhile(db.store, meanwhile), tmp_path / "audit.anchor")  # type: ignore[arg-type]
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), err
        assert "2 requests match it" in out

        async def asking() -> None:
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="Again?"))

        # a server that never stops writing: said so, not called tampering
        code = await audit_verify(WrittenMeanwhile(db.store, asking, every=True), tmp_path / "audit.anchor")  # type: ignore[arg-type]
        out, err = capsys.readouterr()
        assert code == 1 and err.splitlines() == [
            "the requests changed each of the 5 times they were read (a busy server): "
            "not compared with the audit log; run audit verify again"
        ]
