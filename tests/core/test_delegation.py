"""Delegation: while a delegation is active, what would go to ``owner`` goes to ``backup``, and
backup's answer is credited to backup on behalf of owner; its window starts and ends at the times
written (no sleeps: the windows are placed around now); chains are bounded and loops refused; a
delegate counts once in a quorum; ``hitl-mcp delegate`` sets, lists and ends one for every process on
the store, and the inbox's Away form sets and ends one the same way.

Real broker and SQLite store with the kit's ``TestChannel``: owner is reached on ``mail`` only, backup
on ``push`` only, so where a request went says who it went to.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels.base import Counted, Late
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.core import delegation
from hitl_mcp.core.delegation import MAX_HOPS, Delegation, chain_problem, delegate_of
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Status, iso, now
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.results import to_outcome
from hitl_mcp.core.store import Store
from hitl_mcp.store.sqlite import SqliteStore
from tests.conftest import cli, make_config, running
from tests.support.harness import channel_broker
from tests.support.meeting import meeting_stores
from tests.web.test_inbox_pages import browser_like, csrf, form

pytestmark = pytest.mark.anyio

PEOPLE = {
    "owner": {"mail": "owner@example.com"},
    "backup": {"push": "BACKUP"},
    "lead": {"push": "LEAD", "mail": "lead@example.com"},
}


def away(
    frm: str = "owner", to: str = "backup", start: float | None = None, end: float | None = None
) -> Delegation:
    return Delegation.model_validate(
        {"from": frm, "to": to, "from_time": start, "until": end or now() + 3600}
    )


def push(hub: Any) -> TestChannel:
    return TestChannel("push", hub=hub)


def mail(hub: Any) -> TestChannel:
    return TestChannel("mail", hub=hub)


def use(broker: Broker, *delegations: Delegation) -> tuple[TestChannel, TestChannel]:
    broker.policy = Policy(
        people=PEOPLE, types={"push": "testing", "mail": "testing"}, delegations=delegations
    )
    phone, inbox = broker.channels["push"], broker.channels["mail"]
    assert isinstance(phone, TestChannel) and isinstance(inbox, TestChannel)
    return phone, inbox


async def test_the_window_starts_and_ends_when_written(tmp_path: Path) -> None:
    t = now()
    # pure: the same delegation before, during and after its window
    policy = Policy(people=PEOPLE, types={"push": "testing", "mail": "testing"})
    policy = Policy(**{**policy.__dict__, "delegations": [away(start=t + 100, end=t + 200)]})
    assert policy.at(t + 99.9).channels_of(["owner"]) == ["mail"]
    assert policy.at(t + 100).channels_of(["owner"]) == ["push"]
    assert policy.at(t + 199.9).channels_of(["owner"]) == ["push"]
    assert policy.at(t + 200).channels_of(["owner"]) == ["mail"]

    async with channel_broker(tmp_path, push, mail) as broker:
        # started a second ago: the request goes to backup, and the trail says why
        use(broker, away(start=t - 1, end=t + 3600))
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Ship it?", to=["owner"]))
        assert request.channels == ["push"] and request.to == ["owner"]
        trail = [(row.event, row.data) for row in await broker.history.audit(request.id)]
        assert ("delegated", {"person": "owner", "to": "backup"}) in trail
        phone, _ = use(broker, away(start=t - 1, end=t + 3600))
        await phone.reply(request.id, "BACKUP", text="yes")
        settled = await broker.get_or_raise(request.id)
        assert (settled.person, settled.on_behalf_of) == ("backup", "owner")
        assert to_outcome(settled, 0).on_behalf_of == "owner"
        answered = [row for row in await broker.history.audit(request.id) if row.event == "answered"]
        assert answered[0].data["person"] == "backup" and answered[0].data["on_behalf_of"] == "owner"
        (reply,) = await broker.history.replies(request.id)
        assert (reply.person, reply.on_behalf_of) == ("backup", "owner")

        # ended a second ago: owner is asked again, and a reply from backup is their own
        use(broker, away(start=t - 3600, end=t - 1))
        later, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="And now?", to=["owner"]))
        assert later.channels == ["mail"]
        assert "delegated" not in [row.event for row in await broker.history.audit(later.id)]
        await phone.reply(later.id, "BACKUP", text="still me")
        settled = await broker.get_or_raise(later.id)
        assert (settled.person, settled.on_behalf_of) == ("backup", None)


async def test_a_vote_is_credited_by_the_delegations_active_when_it_comes(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, _ = use(broker, away())
        two = Quorum(required=2, of=["owner", "lead"])
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys", approvals=two))
        assert request.channels == ["push", "mail"]  # backup (for owner) on push, lead on both
        # the delegation has ended by the time backup votes: backup is not an approver
        use(broker, away(start=now() - 7200, end=now() - 1))
        said = await phone.reply(request.id, "BACKUP", decision="approve")
        assert isinstance(said, Late) and "backup is not one of the approvers" in said.reason
        assert (await broker.get_or_raise(request.id)).votes == []


async def test_a_delegate_counts_once_in_a_quorum(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, inbox = use(broker, away())
        # backup stands in for owner: backup's vote fills owner's seat, and owner cannot fill it again
        two = Quorum(required=2, of=["owner", "lead"])
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys", approvals=two))
        said = await phone.reply(request.id, "BACKUP", decision="approve", comment="for owner")
        assert isinstance(said, Counted) and said.progress == "1 of 2 approvals — waiting for lead"
        again = await phone.reply(request.id, "BACKUP", decision="approve")
        assert isinstance(again, Late) and again.reason == "backup already voted"
        owner = await inbox.reply(request.id, "owner@example.com", decision="approve")
        assert isinstance(owner, Late) and owner.reason == "owner already voted (by backup)"
        await inbox.reply(request.id, "lead@example.com", decision="approve")
        settled = await broker.get_or_raise(request.id)
        assert settled.status == Status.ANSWERED and settled.approved is True
        votes = [(v.person, v.on_behalf_of) for v in to_outcome(settled, 0).votes or []]
        assert votes == [("backup", "owner"), ("lead", None)]

        # backup is an approver too, and owner's delegate: acting for both, backup counts once
        both = Quorum(required=2, of=["backup", "owner", "lead"])
        other, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the cache", approvals=both))
        assert isinstance(await phone.reply(other.id, "BACKUP", decision="approve"), Counted)
        second = await phone.reply(other.id, "BACKUP", decision="approve")
        assert isinstance(second, Late) and second.reason == "backup already voted"
        stored = await broker.get_or_raise(other.id)
        assert (
            stored.status == Status.PENDING
            and stored.progress == "1 of 2 approvals — waiting for owner or lead"
        )


def test_chains_are_bounded_and_loops_refused() -> None:
    hops = [away(a, b) for a, b in zip("abcdefg", "bcdefg", strict=False)]
    edges = {d.from_: d.to for d in hops}
    assert delegate_of("a", edges) == ("f", ["b", "c", "d", "e"])  # five hops, no further
    assert chain_problem(hops[:MAX_HOPS]) is None
    assert (
        chain_problem(hops) == "a chain of delegations is longer than 5 hops: a -> b -> c -> d -> e -> f -> g"
    )
    loop = [away("owner", "backup"), away("backup", "lead"), away("lead", "owner")]
    assert chain_problem(loop) == "delegations form a loop: owner -> backup -> lead -> owner"
    assert delegate_of("owner", {d.from_: d.to for d in loop}) == ("lead", ["backup"])  # stops before owner
    # windows that do not overlap are not a loop: owner away in December, backup in January
    t = now()
    apart = [away(end=t + 100), away("backup", "owner", start=t + 200, end=t + 300)]
    assert chain_problem(apart) is None
    # nor are back-to-back ones: backup takes over from owner at the very instant owner's ends
    handover = [away(end=t + 100), away("backup", "owner", start=t + 100, end=t + 200)]
    assert chain_problem(handover) is None
    assert chain_problem(list(reversed(handover))) is None
    # but one second of overlap is a loop
    overlapping = [away(end=t + 101), away("backup", "owner", start=t + 100, end=t + 200)]
    assert chain_problem(overlapping) == "delegations form a loop: owner -> backup -> owner"


def config_error(delegations: str) -> str:
    text = textwrap.dedent("""
        channels: {web: {type: web}}
        people:
          owner: {web: o}
          backup: {web: b}
        """) + textwrap.dedent(delegations)
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="hitl.yaml", env={})
    return "\n".join(str(p) for p in [info.value, *info.value.more])


def test_config_delegations_are_checked() -> None:
    loop = config_error("""
        delegations:
          - {from: owner, to: backup, until: 2026-12-24}
          - {from: backup, to: owner, from_time: "2026-12-20T09:00:00Z", until: 2026-12-26}
        """)
    assert loop == "hitl.yaml:7: delegations: delegations form a loop: owner -> backup -> owner"
    assert "delegations[0]: owner cannot delegate to themselves" in config_error(
        "delegations: [{from: owner, to: owner, until: 2026-12-24}]"
    )
    assert "delegations[0].to: unknown person 'carol'; people: owner, backup" in config_error(
        "delegations: [{from: owner, to: carol, until: 2026-12-24}]"
    )
    assert "delegations[0]: until must come after from_time" in config_error(
        "delegations: [{from: owner, to: backup, from_time: 2026-12-24, until: 2026-12-24}]"
    )
    assert config_error("delegations: [{from: owner, to: backup, until: next week}]") == (
        "hitl.yaml:6: delegations[0].until: expected an ISO date or date-time such as 2026-12-24 or "
        "2026-12-24T18:00:00Z, got 'next week'"
    )


async def test_the_cli_sets_lists_and_ends_for_every_process(tmp_path: Path, state_dir: Path) -> None:
    config = tmp_path / "hitl.yaml"
    config.write_text(
        textwrap.dedent("""
        channels: {web: {type: web}}
        people:
          owner: {web: o}
          backup: {web: b}
          lead: {web: l}
        """)
    )
    c = ["--config", str(config)]
    code, out, err = await cli(state_dir, "delegate", "owner", "backup", "--until", "2099-01-01", *c)
    assert code == 0, err
    assert out.strip() == "delegated: owner -> backup until 2099-01-01T00:00:00.000Z"

    # another process on the store (this test's broker) sends owner's requests to backup
    db = state_dir / "hitl.sqlite3"
    async with channel_broker(tmp_path, push, mail, db=db) as broker:
        use(broker)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Ship?", to=["owner"]))
        assert request.channels == ["push"]
        (stored,) = await delegation.stored(broker.store)
        assert stored.set_by is not None and stored.set_by.endswith("(terminal)")

    code, out, err = await cli(state_dir, "delegate", "--list", *c)
    assert code == 0, err
    assert "owner -> backup  active  until 2099-01-01T00:00:00.000Z  (set by " in out

    code, out, err = await cli(state_dir, "delegate", "backup", "owner", "--until", "2099-01-01", *c)
    assert (
        code == 1 and err.strip() == "hitl-mcp: refused: delegations form a loop: backup -> owner -> backup"
    )
    code, out, err = await cli(state_dir, "delegate", "owner", "carol", "--until", "2099-01-01", *c)
    assert code == 1 and "unknown person 'carol'; people: owner, backup, lead" in err
    code, out, err = await cli(state_dir, "delegate", "owner", "owner", "--until", "2099-01-01", *c)
    assert code == 1 and "refused: owner cannot delegate to themselves" in err
    code, out, err = await cli(state_dir, "delegate", "owner", "lead", "--until", "2000-01-01", *c)
    assert code == 1 and "refused: until is in the past" in err

    code, out, err = await cli(state_dir, "delegate", "--end", "owner", *c)
    assert code == 0, err
    assert out.strip() == "ended: owner no longer delegates to backup"
    code, out, err = await cli(state_dir, "delegate", "--end", "owner", *c)
    assert code == 1 and "no run-time delegation from 'owner'" in err

    async with channel_broker(tmp_path, push, mail, db=db) as broker:
        use(broker)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Ship now?", to=["owner"]))
        assert request.channels == ["mail"]
        rows = [
            (r.event, r.actor, r.data)
            for r in await broker.history.audit()
            if r.event.startswith("delegation")
        ]
    assert [(e, d) for e, _, d in rows] == [
        ("delegation_set", {"from": "owner", "to": "backup", "until": iso(delegation.when("2099-01-01"))}),
        ("delegation_ended", {"from": "owner", "to": "backup"}),
    ]
    assert all(actor and actor.endswith("(terminal)") for _, actor, _ in rows)


async def put_for_an_hour(store: Store, person: str, at: float) -> None:
    """``person`` away to backup for an hour from ``at``, as ``hitl-mcp delegate`` sets it."""
    await delegation.put(
        store, person, "backup", at + 3600, people=PEOPLE, configured=[], actor=person, at=at
    )


async def test_two_delegations_set_at_once_by_two_processes_are_both_kept(tmp_path: Path) -> None:
    """Two processes (the CLI and the inbox, two replicas) each read the list before either writes
    it: both delegations are stored, each audited once."""
    at = now()
    async with meeting_stores(tmp_path / "hitl.sqlite3", 2, *delegation.STATE) as stores:
        async with anyio.create_task_group() as tg:
            tg.start_soon(put_for_an_hour, stores[0], "owner", at)
            tg.start_soon(put_for_an_hour, stores[1], "lead", at)
        kept = await delegation.stored(stores[0])
        assert sorted((d.from_, d.to) for d in kept) == [("lead", "backup"), ("owner", "backup")]
        rows = [(r.event, r.data["from"]) for r in await stores[0].audit()]
        assert sorted(rows) == [("delegation_set", "lead"), ("delegation_set", "owner")]


async def test_an_end_and_a_set_at_once_both_take_effect_and_two_ends_end_once(tmp_path: Path) -> None:
    at = now()
    async with channel_broker(tmp_path, start=False) as broker:  # owner's delegation, to end
        await put_for_an_hour(broker.store, "owner", at)
    async with meeting_stores(tmp_path / "hitl.sqlite3", 3, *delegation.STATE) as stores:
        ended: list[list[Delegation]] = []

        async def end(store: Store) -> None:
            ended.append(await delegation.end(store, "owner", "inbox", at))

        async with anyio.create_task_group() as tg:
            tg.start_soon(end, stores[0])
            tg.start_soon(end, stores[1])
            tg.start_soon(put_for_an_hour, stores[2], "lead", at)
        assert sorted(len(e) for e in ended) == [0, 1]  # owner's ended once, by one of the two
        assert [(d.from_, d.to) for d in await delegation.stored(stores[0])] == [("lead", "backup")]
        rows = [(r.event, r.data["from"]) for r in await stores[0].audit()]
        assert sorted(rows) == [
            ("delegation_ended", "owner"),
            ("delegation_set", "lead"),
            ("delegation_set", "owner"),
        ]


async def test_a_delegation_runs_out_at_its_until(tmp_path: Path) -> None:
    """``until`` is the first instant a delegation no longer holds: one that would end at once is
    refused, and from its ``until`` on a delegation is neither in a new one's way nor ended again. What
    is stored (the config's keys, for every process on the store) and audited."""
    at = delegation.when("2098-12-24T09:00:00Z")

    async def put(person: str, to: str, until: float, start: float | None, moment: float) -> Delegation:
        return await delegation.put(
            store, person, to, until, start, people=PEOPLE, configured=[], actor="ana", at=moment
        )

    async with channel_broker(tmp_path, start=False) as broker:
        store = broker.store
        with pytest.raises(delegation.Refused, match=r"^until is in the past$"):
            await put("owner", "backup", at, None, at)
        await put("owner", "backup", at + 3600, None, at)
        # an hour later owner's has run out: backup -> owner is no loop, and replaces it in the list
        later = at + 3600
        await put("backup", "owner", later + 3600, None, later)
        await put("lead", "backup", later + 600, later + 60, later)  # from a minute on, for ten
        assert await delegation.end(store, "owner", "ana", later) == []  # nothing left to end
        assert await delegation.end(store, "backup", "ana", later + 3600) == []  # its until: over

        assert json.loads(await store.get_state(*delegation.STATE) or "") == [
            {
                "from": "backup",
                "to": "owner",
                "from_time": None,
                "until": later + 3600,
                "set_by": "ana",
                "set_at": later,
            },
            {
                "from": "lead",
                "to": "backup",
                "from_time": later + 60,
                "until": later + 600,
                "set_by": "ana",
                "set_at": later,
            },
        ]
        rows = [(r.event, r.data) for r in await broker.history.audit() if r.event.startswith("delegation")]
        assert rows == [
            ("delegation_set", {"from": "owner", "to": "backup", "until": "2098-12-24T10:00:00.000Z"}),
            ("delegation_set", {"from": "backup", "to": "owner", "until": "2098-12-24T11:00:00.000Z"}),
            (
                "delegation_set",
                {
                    "from": "lead",
                    "to": "backup",
                    "until": "2098-12-24T10:10:00.000Z",
                    "from_time": "2098-12-24T10:01:00.000Z",
                },
            ),
        ]


class _BusyStore(SqliteStore):
    """A store on which, while ``busy``, another process changes the delegations (lead's, to owner)
    right after each read of them, so that every write over what was read loses."""

    busy = False
    changes = 0

    async def get_state(self, channel: str, key: str) -> str | None:
        value = await super().get_state(channel, key)
        if self.busy and (channel, key) == delegation.STATE:
            self.changes += 1
            theirs = away("lead", "owner").model_copy(update={"set_at": float(self.changes)})
            read = [Delegation.model_validate(d) for d in json.loads(value or "[]")]
            await delegation.store(self, [*(d for d in read if d.from_ != "lead"), theirs])
        return value


async def test_a_change_that_keeps_losing_to_others_changes_nothing_and_says_so(tmp_path: Path) -> None:
    store = _BusyStore(tmp_path / "hitl.sqlite3")
    await store.open()
    try:
        at = now()
        await put_for_an_hour(store, "owner", at)
        (before,) = await delegation.stored(store)
        store.busy = True
        with pytest.raises(ValueError) as lost:
            await put_for_an_hour(store, "owner", at + 1)
        assert not isinstance(lost.value, delegation.Refused) and str(lost.value) == (
            "owner's delegation was not set: the delegations were changed by someone else 5 times "
            "while it was written; nothing was changed, try again"
        )
        with pytest.raises(ValueError) as lost:
            await delegation.end(store, "owner", "inbox", at + 1)
        assert str(lost.value) == (
            "owner's delegation was not ended: the delegations were changed by someone else 5 times "
            "while it was written; nothing was changed, try again"
        )
        assert store.changes == 2 * delegation.ATTEMPTS
        store.busy = False
        assert [d for d in await delegation.stored(store) if d.from_ == "owner"] == [before]
        rows = [(r.event, r.data["from"]) for r in await store.audit()]
        assert rows == [("delegation_set", "owner")]  # the first one only
    finally:
        await store.close()


async def test_the_inbox_lists_the_delegations_active_now(state_dir: Path) -> None:
    people = """
people:
  owner: {web: o}
  backup: {web: b}
  lead: {web: l}
delegations:
  - {from: owner, to: backup, until: 2099-01-01}
  - {from: lead, to: backup, from_time: 2098-01-01, until: 2099-01-01}
"""
    async with running(state_dir, make_config(people)) as rt, browser_like(rt) as web:
        broker = await rt.broker()
        by_cli = away("backup", "lead", end=now() + 60).model_copy(update={"set_by": "ana (terminal)"})
        await delegation.store(broker.store, [by_cli])
        page = (await web.get("/")).text
        assert "owner → backup" in page and "backup → lead" in page
        assert "lead → backup" not in page  # not started yet
        # the run-time one can be ended from the inbox (with the form's CSRF token); the config's cannot
        assert 'action="/delegations/backup/end"' in page and 'action="/delegations/owner/end"' not in page
        forged = await web.post("/delegations/backup/end", data=form(None))
        assert forged.status_code in (400, 403) and len(await delegation.stored(broker.store)) == 1
        ended = await web.post("/delegations/backup/end", data=form(csrf(rt, web)))
        assert ended.status_code == 303 and await delegation.stored(broker.store) == []
        rows = [
            (r.event, r.actor, r.data) for r in await broker.history.audit() if r.event == "delegation_ended"
        ]
        assert rows == [("delegation_ended", "operator", {"from": "backup", "to": "lead"})]
        again = await web.post("/delegations/owner/end", data=form(csrf(rt, web)))
        assert again.status_code == 404
        assert "backup → lead" not in (await web.get("/")).text


AWAY_PEOPLE = """
people:
  owner: {web: o}
  backup: {web: b}
  lead: {web: l}
delegations:
  - {from: lead, to: owner, until: 2099-01-01}
"""


async def delegated_to(broker: Broker, person: str) -> list[dict[str, Any]]:
    """The ``delegated`` rows of a new request to ``person``: whom the broker sent it to instead."""
    request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Who answers?", to=[person]))
    return [row.data for row in await broker.history.audit(request.id) if row.event == "delegated"]


async def test_the_inbox_sets_a_delegation_as_the_cli_does(state_dir: Path) -> None:
    async with running(state_dir, make_config(AWAY_PEOPLE)) as rt, browser_like(rt) as web:
        broker = await rt.broker()
        page = (await web.get("/")).text
        assert 'action="/delegations"' in page and '<option value="lead">lead</option>' in page
        assert await delegated_to(broker, "owner") == []

        # a form without the session's CSRF token changes nothing
        fields = {"from": "owner", "to": "backup", "until": "2099-01-01T09:30"}
        forged = await web.post("/delegations", data=form(None, **fields))
        assert forged.status_code == 403 and await delegation.stored(broker.store) == []

        done = await web.post("/delegations", data=form(csrf(rt, web), **fields))
        assert done.status_code == 303 and done.headers["location"] == "/"
        # the next request to owner goes to backup
        assert await delegated_to(broker, "owner") == [{"person": "owner", "to": "backup"}]
        (stored,) = await delegation.stored(broker.store)
        assert (stored.from_, stored.to, stored.set_by) == ("owner", "backup", "operator")
        rows = [(r.actor, r.data) for r in await broker.history.audit() if r.event == "delegation_set"]
        assert rows == [("operator", {"from": "owner", "to": "backup", "until": "2099-01-01T09:30:00.000Z"})]
        page = (await web.get("/")).text
        assert "owner → backup" in page and 'action="/delegations/owner/end"' in page

        async def refused(**sent: str) -> str:
            said = await web.post("/delegations", data=form(csrf(rt, web), **{**fields, **sent}))
            assert said.status_code == 422
            return said.text

        # refusals come back on the inbox, with the form as it was sent
        # backup -> lead closes a loop with the config's lead -> owner and the inbox's owner -> backup
        loop = await refused(**{"from": "backup", "to": "lead"})
        assert "Refused: delegations form a loop: backup -&gt; lead -&gt; owner -&gt; backup." in loop
        assert (
            '<option value="backup" selected>' in loop
            and '<option value="lead" selected>' in loop
            and 'value="2099-01-01T09:30"' in loop
        )
        assert "Refused: owner cannot delegate to themselves." in await refused(to="owner")
        assert "Refused: until is in the past." in await refused(until="2000-01-01T00:00")
        assert "Unknown person &#39;carol&#39;; people: owner, backup, lead." in await refused(to="carol")
        assert "is not an ISO date or date-time" in await refused(until="next week")
        assert "Say until when the delegation lasts." in await refused(until="")
        as_json = await web.post(
            "/delegations",
            data=form(csrf(rt, web), **{**fields, "to": "owner"}),
            headers={"Accept": "application/json"},
        )
        assert as_json.status_code == 422
        assert as_json.json() == {"ok": False, "error": "Refused: owner cannot delegate to themselves."}
        assert [d.to for d in await delegation.stored(broker.store)] == ["backup"]  # nothing changed
        assert len([r for r in await broker.history.audit() if r.event == "delegation_set"]) == 1

        # a second one for owner replaces the first; it starts later, so owner is asked until then
        later = {
            "from": "owner",
            "to": "backup",
            "from_time": "2098-06-01T00:00",
            "until": "2098-07-01T00:00",
        }
        assert (await web.post("/delegations", data=form(csrf(rt, web), **later))).status_code == 303
        (stored,) = await delegation.stored(broker.store)
        assert (stored.to, stored.from_time) == ("backup", delegation.when("2098-06-01"))
        assert await delegated_to(broker, "owner") == []


async def test_the_away_form_needs_people(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        page = (await web.get("/")).text
        assert 'action="/delegations"' not in page and ">Away<" not in page
        said = await web.post(
            "/delegations", data=form(csrf(rt, web), **{"from": "a", "to": "b", "until": "2099-01-01"})
        )
        assert (
            said.status_code == 422
            and "Unknown person &#39;a&#39;; people: none are configured." in said.text
        )


def test_when_reads_a_date_a_date_time_or_a_number_and_says_what_it_expected() -> None:
    """The times ``delegate --until`` and the config's ``until:`` take, and the words for the rest."""
    from datetime import date, datetime, timedelta, timezone

    from hitl_mcp.core.delegation import when

    assert when("2026-12-24") == 1_798_070_400.0  # 00:00 UTC that day
    assert when(" 2026-12-24T18:00:00Z ") == 1_798_135_200.0
    assert when("2026-12-24T18:00:00+01:00") == 1_798_131_600.0  # its own offset
    assert when("2026-12-24+01:00") == 1_798_066_800.0  # a date with an offset: midnight there
    assert when("2026-12-24-05:00") == 1_798_088_400.0
    assert when("2026-12-24T18:00:00") == 1_798_135_200.0  # none: UTC
    assert when(date(2026, 12, 24)) == 1_798_070_400.0
    assert when(datetime(2026, 12, 24, 18, tzinfo=timezone(timedelta(hours=-2)))) == 1_798_142_400.0
    assert when(datetime(2026, 12, 24, 18)) == 1_798_135_200.0
    assert when("2026-12-24Z") == 1_798_070_400.0  # a date with UTC's Z
    assert when(5) == 5.0 and isinstance(when(5), float)
    for value, said in (
        (True, "expected an ISO date or date-time such as 2026-12-24 or 2026-12-24T18:00:00Z"),
        ("soon", "'soon' is not an ISO date or date-time such as 2026-12-24 or 2026-12-24T18:00:00Z"),
        (  # ISO 8601's zone designator is a capital Z
            "2026-12-24T18:00:00z",
            "'2026-12-24T18:00:00z' is not an ISO date or date-time such as 2026-12-24 or "
            "2026-12-24T18:00:00Z",
        ),
        ([2026], "expected an ISO date or date-time such as 2026-12-24"),
    ):
        with pytest.raises(ValueError) as refused:
            when(value)
        assert str(refused.value) == said


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="time.tzset is Unix only")
def test_a_time_without_an_offset_is_utc_whatever_the_servers_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--until 2026-12-24`` means the same instant on a server set to New York (UTC-5) or Tokyo."""
    from datetime import date, datetime

    from hitl_mcp.core.delegation import when

    try:
        for zone in ("EST+05", "JST-09"):  # POSIX zones: no time zone database needed
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            assert when("2026-12-24") == 1_798_070_400.0
            assert when("2026-12-24T18:00:00") == 1_798_135_200.0
            assert when(date(2026, 12, 24)) == 1_798_070_400.0
            assert when(datetime(2026, 12, 24, 18)) == 1_798_135_200.0
    finally:
        monkeypatch.undo()
        time.tzset()
