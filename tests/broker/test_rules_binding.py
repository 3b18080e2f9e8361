"""A remembered answer binds what the person saw (issue 28, item 3).

"Approve & remember" in the inbox used to bind the action line and the payload only: a later ask with
the same line, new details ("Also runs: psql -c 'DROP DATABASE prod'") and a higher risk was approved by
the rule. Now the rule binds the details and context shown (or none) and a risk no higher than the one
shown; widening either is a box on the form. Rules stored before this keep their old, broad meaning, on
both engines. The inbox form is driven as a browser sends it: the fields the page carries, as they come.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskDefaults, Broker
from hitl_mcp.broker.rules import Remembered
from hitl_mcp.core.models import Request, Status, now
from hitl_mcp.core.store import Store
from hitl_mcp.runtime import Runtime
from hitl_mcp.store.sqlite import SqliteStore
from tests.broker.test_rules import approval
from tests.conftest import cli as hitl
from tests.conftest import running
from tests.mcp.test_elicitation import browser, csrf_of
from tests.support.postgres import Cluster

pytestmark = pytest.mark.anyio

SEEN = "Runs the migration on staging."
MORE = SEEN + " Also runs: psql -c 'DROP DATABASE prod'"


def form_of(page: str) -> dict[str, str]:
    """The remember form as the page fills it in: what a browser sends when the person saves it."""
    fields = dict(re.findall(r'name="(agent|tool|hours|uses)" value="([^"]*)"', page))
    args = re.search(r'name="arguments"[^>]*>([^<]*)</textarea>', page)
    risk = re.search(r'<option value="(\w+)" selected>', page)
    assert args and risk and set(fields) == {"agent", "tool", "hours", "uses"}
    fields = {k: html.unescape(v) for k, v in fields.items()}
    return {
        **fields,
        "arguments": html.unescape(args.group(1)),
        "max_risk": risk.group(1),
        "csrf": csrf_of(page),
    }


@contextlib.asynccontextmanager
async def remembered(
    state_dir: Path, widen: dict[str, str], **seen: Any
) -> AsyncIterator[tuple[Broker, str, Runtime]]:
    """A runtime where the person approved an approval through "Approve & remember", with ``widen``
    ticked on the form; the broker, the form page and the runtime."""
    async with running(state_dir) as rt:
        broker = await rt.broker()
        first, _ = await broker.ask(approval(channels=["web"], **seen))
        async with browser(rt) as person:
            page = (await person.get(f"/requests/{first.id}/remember")).text
            r = await person.post(f"/requests/{first.id}/remember", data={**form_of(page), **widen})
            assert r.status_code == 303, r.text
        assert (await broker.get_or_raise(first.id)).approved is True
        yield broker, page, rt


async def ask_again(broker: Broker, key: str, **fields: Any) -> Request:
    request, created = await broker.ask(approval(channels=["web"], idempotency_key=key, **fields))
    assert created
    return request


def by_rule(request: Request) -> bool:
    assert request.status in (Status.PENDING, Status.ANSWERED)
    return request.status == Status.ANSWERED and request.approved is True and request.channel == "rule"


async def test_the_default_rule_approves_only_what_the_person_saw(state_dir: Path) -> None:
    async with remembered(state_dir, {}, details=SEEN, risk="low") as (broker, page, _):
        assert SEEN in page and "a risk no higher than low" in page
        (rule,) = await broker.rules()
        assert (rule.shown, rule.max_risk, rule.high_risk) == (
            {"details": SEEN, "context": None},
            "low",
            False,
        )

        # new details, a higher risk, no details at all: each is asked of a person, as usual
        other_details = await ask_again(broker, "more", details=MORE, risk="low")
        higher = await ask_again(broker, "medium", details=SEEN, risk="medium")
        no_details = await ask_again(broker, "none", risk="low")
        with_context = await ask_again(broker, "context", details=SEEN, context="prod", risk="low")
        for request in (other_details, higher, no_details, with_context):
            assert not by_rule(request) and request.channels == ["web"], request
        # the identical ask is the rule's, at once; one that states no risk counts as low
        same = await ask_again(broker, "same", details=SEEN, risk="low")
        unstated = await ask_again(broker, "unstated", details=SEEN)
        assert by_rule(same) and same.responder == f"rule {rule.id}" and by_rule(unstated)
        assert (await broker.rules())[0].fired == 2


@pytest.mark.parametrize(
    ("widen", "expected"),
    [
        ({"any_details": "yes"}, {"more": True, "medium": False, "high": False}),
        ({"max_risk": "medium"}, {"more": False, "medium": True, "high": False}),
        (
            {"any_details": "yes", "max_risk": "high", "confirm_high_risk": "yes"},
            {"more": True, "medium": True, "high": True},
        ),
    ],
    ids=["any-details", "up-to-medium", "both-up-to-high"],
)
async def test_widening_on_the_form_widens_exactly_what_was_chosen(
    state_dir: Path, widen: dict[str, str], expected: dict[str, bool]
) -> None:
    async with remembered(state_dir, widen, details=SEEN, risk="low") as (broker, _, _):
        asks = {
            "more": await ask_again(broker, "more", details=MORE, risk="low"),
            "medium": await ask_again(broker, "medium", details=SEEN, risk="medium"),
            "high": await ask_again(broker, "high", details=SEEN, risk="high"),
        }
        assert {name: by_rule(request) for name, request in asks.items()} == expected
        # the payload stays bound whatever was widened
        assert not by_rule(await ask_again(broker, "v4", details=SEEN, risk="low", payload={"tag": "v4"}))


async def test_a_rule_up_to_high_risk_needs_its_confirmation(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        first, _ = await broker.ask(approval(channels=["web"], risk="low"))
        async with browser(rt) as person:
            page = (await person.get(f"/requests/{first.id}/remember")).text
            r = await person.post(
                f"/requests/{first.id}/remember", data={**form_of(page), "max_risk": "high"}
            )
            assert r.status_code == 422 and "confirmation box" in r.text
        assert await broker.rules() == [] and (await broker.get_or_raise(first.id)).status == Status.PENDING


async def test_an_approval_with_no_payload_says_only_the_action_line_is_bound(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        bare, _ = await broker.ask(approval(channels=["web"], payload=None, risk="medium"))
        carried, _ = await broker.ask(approval(channels=["web"], text="Deploy v4", payload={"tag": "v4"}))
        async with browser(rt) as person:
            page = (await person.get(f"/requests/{bare.id}/remember")).text
            with_payload = (await person.get(f"/requests/{carried.id}/remember")).text
            assert "This approval has no payload: the rule binds only the action line (“Deploy v3”)" in page
            assert 'id="r-no-payload"' not in with_payload and "exactly this payload" in with_payload
            r = await person.post(f"/requests/{bare.id}/remember", data=form_of(page))
            assert r.status_code == 303
        (rule,) = await broker.rules()
        assert (rule.arguments, rule.shown, rule.max_risk) == (
            {"exact": None},
            {"details": None, "context": None},
            "medium",
        )


async def test_the_cli_and_the_inbox_say_what_a_rule_binds(state_dir: Path) -> None:
    async with remembered(state_dir, {}, details=SEEN, risk="low") as (broker, _, rt):
        await broker.add_rule(agent="*", tool="shell", arguments=None, created_by="alice (terminal)")
        rules = await broker.rules()
        async with browser(rt) as person:
            page = html.unescape((await person.get("/rules")).text)
        assert "Binds: any details; any risk but high" in page
        assert f'Binds: details "{SEEN}", no context; risk up to low' in page
    code, out, err = await hitl(state_dir, "rules", "list")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "shell with any arguments" in lines[1]
    assert lines[2].strip() == "binds any details; any risk but high"
    assert "Deploy v3 with exactly" in lines[4]
    assert lines[5].strip() == f'binds details "{SEEN}", no context; risk up to low'
    code, out, _ = await hitl(state_dir, "rules", "list", "--json")
    listed = {r["id"]: r for r in json.loads(out)}
    made = listed[rules[1].id]
    assert (made["shown"], made["max_risk"]) == ({"details": SEEN, "context": None}, "low")
    assert made["binds"] == f'details "{SEEN}", no context; risk up to low'
    assert (listed[rules[0].id]["shown"], listed[rules[0].id]["max_risk"]) == (None, None)


# ------------------------------------------------------------------------------ rules made before


def old_rule(false: str) -> str:
    """The SQL that stored a rule before schema 10: no ``shown``, no ``max_risk``."""
    return (
        "INSERT INTO rules (agent, tool, arguments, high_risk, created_by, created_at) VALUES"
        f" ('bot', 'Deploy v3', '{json.dumps({'exact': {'tag': 'v3'}})}', {false}, 'alice', {now()})"
    )


#: what the migrations for people's sign-in and for receipts added, taken away again (a database
#: from before them)
UNDO_PEOPLE = (
    "ALTER TABLE web_sessions DROP COLUMN person; DROP TABLE sign_counts;"
    " ALTER TABLE replies DROP COLUMN proof; DROP TABLE receipts; ALTER TABLE requests DROP COLUMN receipt;"
)

#: PostgreSQL's migration 16 (an audit chain per process), undone
UNDO_CHAINS = (
    "ALTER TABLE audit DROP CONSTRAINT audit_pkey;"
    " ALTER TABLE audit DROP COLUMN chain, DROP COLUMN written_at;"
    " ALTER TABLE audit ADD PRIMARY KEY (seq); DROP TABLE audit_chains;"
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def before_binding(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[[], Awaitable[Store]]]:
    """A database at schema 9 (before rules bound details and risk) holding one rule made then; and
    how to open the store on it, as the new code does (it migrates)."""
    if request.param == "sqlite":
        path = tmp_path / "hitl.sqlite3"
        store = SqliteStore(path)
        await store.open()
        await store.close()
        db = sqlite3.connect(path, isolation_level=None)
        db.executescript(
            "ALTER TABLE rules DROP COLUMN shown; ALTER TABLE rules DROP COLUMN max_risk;"
            "DROP TABLE credentials;"
            "ALTER TABLE requests DROP COLUMN preview; ALTER TABLE requests DROP COLUMN preview_sha256;"
            "ALTER TABLE replies DROP COLUMN preview_sha256;"
            f"{UNDO_PEOPLE} PRAGMA user_version = 9; {old_rule('0')};"
        )
        db.close()

        async def open_sqlite() -> Store:
            new = SqliteStore(path)
            await new.open()
            return new

        yield open_sqlite
        return
    import asyncpg

    from hitl_mcp.store.postgres import PostgresStore

    cluster: Cluster = request.getfixturevalue("postgres_cluster")
    url = await cluster.create_database()
    try:
        pg = PostgresStore(url)
        await pg.open()
        await pg.close()
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "ALTER TABLE rules DROP COLUMN shown, DROP COLUMN max_risk; DROP TABLE credentials;"
                "ALTER TABLE requests DROP COLUMN preview, DROP COLUMN preview_sha256;"
                "ALTER TABLE replies DROP COLUMN preview_sha256;"
                f"{UNDO_PEOPLE} {UNDO_CHAINS} UPDATE hitl_schema SET version = 9; {old_rule('FALSE')};"
            )
        finally:
            await conn.close()

        async def open_pg() -> Store:
            new = PostgresStore(url)
            await new.open()
            return new

        yield open_pg
    finally:
        await cluster.drop_database(url)


async def test_a_rule_stored_before_rules_bound_details_keeps_its_broad_meaning(
    before_binding: Callable[[], Awaitable[Store]], tmp_path: Path
) -> None:
    """Missing fields are the old behaviour: the person who made the rule was told it binds the action
    and the payload, and a migration cannot know what they saw (a rule from the CLI saw nothing)."""
    store = await before_binding()
    try:
        (rule,) = await store.rules(now())
        assert (rule.shown, rule.max_risk, rule.high_risk) == (None, None, False)
        broker = Broker(store, {}, AskDefaults({}, {}), state_dir=tmp_path)
        host = "stdio:bot"  # the agent a rule had then was a stdio client's name (migration 11)
        assert rule.agent == host
        for fields in ({"details": MORE}, {"risk": "medium"}, {"context": "prod", "risk": "low"}):
            gate = await broker.gate(approval(host, **fields))
            assert isinstance(gate, Remembered) and gate.rules == [rule], fields
        assert await broker.gate(approval(host, risk="high")) is None  # never high risk, as before
        assert await broker.gate(approval(host, payload={"tag": "v4"})) is None
    finally:
        await store.close()
