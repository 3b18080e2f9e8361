"""Remembered answers (rules), the kill switch (pause/resume) and batch approve (issue 19).

End to end: a rule made in the inbox answers the next matching ``request_approval`` of a real server
over MCP, never an ``ask_user``, and stops once revoked from the CLI. The rest drives the broker and
the inbox routes in process, with the clock moved by hand where time matters.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.broker import AskDefaults, Broker
from hitl_mcp.broker import broker as broker_module
from hitl_mcp.broker import rules as broker_rules
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.audit_replay import check_requests
from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, Reply, Status, now
from hitl_mcp.core.rules import check_pattern, exactly, matches, subject
from hitl_mcp.core.store import RuleRow
from tests.conftest import (
    TOKEN,
    api_client,
    bearer,
    free_port,
    make_config,
    running,
    sc,
    serve_args,
    server_env,
    server_process,
    text_of,
    write_config,
)
from tests.conftest import cli as hitl
from tests.mcp.test_elicitation import browser, csrf_of
from tests.support.harness import channel_broker
from tests.support.meeting import meeting_stores

pytestmark = pytest.mark.anyio

DEPLOY = {"action": "Deploy v3", "payload": {"tag": "v3"}, "wait_seconds": 0.5}


def approval(owner: str = "bot", **more: Any) -> AskSpec:
    fields: dict[str, Any] = {
        "text": "Deploy v3",
        "payload": {"tag": "v3"},
        "client_name": owner,
        "owner": owner,
    }
    fields.update(more)
    return AskSpec(kind=Kind.APPROVAL, **fields)


# ------------------------------------------------------------------------------ end to end


async def test_a_rule_made_in_the_inbox_answers_the_next_approval_over_mcp(
    tmp_path: Path, state_dir: Path
) -> None:
    port = free_port()
    agent_token = "deploy-agent-token-0123456789"
    config = write_config(
        tmp_path / "hitl.yaml", port, f"agents:\n  deploy-agent: {{token: {agent_token}}}\n"
    )
    base = f"http://127.0.0.1:{port}"
    info = Implementation(name="claude-code", version="1")
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with (
            Client(bearer(f"{base}/mcp", agent_token), mode="legacy", client_info=info) as agent,
            httpx2.AsyncClient(base_url=base) as person,
        ):
            first = sc(await agent.call_tool("request_approval", DEPLOY))
            assert first["status"] == "pending" and first["rule"] is None

            # the person signs in, opens "Approve & remember…" and sends the form as it comes
            assert (await person.get("/login", params={"token": TOKEN})).status_code == 303
            inbox = (await person.get("/")).text
            assert f'href="/requests/{first["request_id"]}/remember"' in inbox
            form_page = (await person.get(f"/requests/{first['request_id']}/remember")).text
            fields = dict(re.findall(r'name="(agent|tool|hours)" value="([^"]*)"', form_page))
            args = re.search(r'name="arguments"[^>]*>([^<]*)</textarea>', form_page)
            assert args and fields == {"agent": "agent:deploy-agent", "tool": "Deploy v3", "hours": "24"}
            form = {**fields, "arguments": html.unescape(args.group(1)), "csrf": csrf_of(form_page)}
            r = await person.post(f"/requests/{first['request_id']}/remember", data=form)
            assert r.status_code == 303 and r.headers["location"].startswith("/rules?added=")
            rule_id = int(r.headers["location"].rsplit("=", 1)[1])

            # the first was the person's approval; the next identical one, the rule's, at once
            done = sc(await agent.call_tool("wait_for_response", {"request_id": first["request_id"]}))
            assert done["approved"] is True and done["rule"] is None
            second = await agent.call_tool("request_approval", DEPLOY)
            out = sc(second)
            assert out["status"] == "answered" and out["approved"] is True and out["rule"] == rule_id
            assert f"remembered rule {rule_id}" in text_of(second)

            # other arguments, and a question with the same words, still reach the person
            other = sc(await agent.call_tool("request_approval", {**DEPLOY, "payload": {"tag": "v4"}}))
            assert other["status"] == "pending"
            question = sc(await agent.call_tool("ask_user", {"question": "Deploy v3", "wait_seconds": 0.5}))
            assert question["status"] == "pending"

            code, shown, _ = await hitl(state_dir, "show", out["request_id"], "--json")
            fired = [a for a in json.loads(shown)["audit"] if a["event"] == "rule_fired"]
            assert code == 0 and fired[0]["data"] == {
                "rule": rule_id,
                "created_by": "operator",
                "uses_left": None,
            }

            # listed in the inbox and the CLI, then revoked from the CLI: the next one waits for a person
            assert f'id="rule-{rule_id}"' in (await person.get("/rules")).text
            code, listed, _ = await hitl(state_dir, "rules", "list", "--json")
            assert [(r["id"], r["fired"], r["live"]) for r in json.loads(listed)] == [(rule_id, 1, True)]
            assert (await hitl(state_dir, "rules", "revoke", str(rule_id)))[0] == 0
            third = sc(await agent.call_tool("request_approval", {**DEPLOY, "idempotency_key": "third"}))
            assert third["status"] == "pending" and third["rule"] is None
            code, listed, _ = await hitl(state_dir, "rules", "list")
            assert "revoked" in listed and "revoked by" in listed


# ------------------------------------------------------------------------------ the rule's limits


async def test_a_rule_never_approves_high_risk_unless_it_says_so(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        await broker.add_rule(agent="bot", tool="Deploy v3", arguments=None, created_by="me")
        high, _ = await broker.ask(approval(risk="high", channels=["web"]))
        assert high.status == Status.PENDING
        await broker.add_rule(agent="bot", tool="Deploy*", arguments=None, created_by="me", high_risk=True)
        high2, _ = await broker.ask(approval(risk="high", channels=["web"], idempotency_key="2"))
        assert high2.status == Status.ANSWERED and high2.approved and high2.responder == "rule 2"
        # and it answered only this one: the first still waits for a person
        assert (await broker.get_or_raise(high.id)).status == Status.PENDING


async def test_a_rule_expires(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        await broker.add_rule(agent="*", tool="Deploy v3", arguments=None, created_by="me", hours=1)
        clock = now
        monkeypatch.setattr(broker_rules, "now", lambda: clock() + 3601)
        late, _ = await broker.ask(approval(channels=["web"]))
        assert late.status == Status.PENDING
        monkeypatch.setattr(broker_rules, "now", clock)
        on_time, _ = await broker.ask(approval(channels=["web"], idempotency_key="k"))
        assert on_time.approved is True


async def test_a_repeat_spends_no_use_and_a_rule_that_ran_out_meanwhile_withdraws_the_ask(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        rule = await broker.add_rule(agent="bot", tool="Deploy v3", arguments=None, created_by="me", uses=2)
        first, created = await broker.ask(approval(channels=["web"], idempotency_key="k"))
        again, created_again = await broker.ask(approval(channels=["web"], idempotency_key="k"))
        assert (created, created_again, again.id, again.responder) == (
            True,
            False,
            first.id,
            f"rule {rule.id}",
        )
        (after,) = await broker.rules()
        assert (after.fired, after.uses_left) == (1, 1)  # the repeat found it answered: no use spent

        # another process takes the last use between this ask's match and its firing
        stale = await broker.store.rules(now())
        assert await broker.store.fire_rule(rule.id, now()) is not None

        async def matched_before(live_at: float | None = None) -> list[RuleRow]:
            return stale

        monkeypatch.setattr(broker.store, "rules", matched_before)
        late, _ = await broker.ask(approval(channels=["web"], idempotency_key="late"))
        assert (late.status, late.approved, late.channels) == (Status.CANCELLED, False, [])
        assert late.comment is not None and "ran out" in late.comment and "ask again" in late.comment


def test_what_a_rule_matches() -> None:
    def rule(tool: str, arguments: Any, agent: str = "bot") -> RuleRow:
        return RuleRow(1, agent, tool, check_pattern(arguments), False, "me", 0, None, None, 0, None, None)

    gated = subject("Run ls", None, {"tool": "shell", "arguments": {"cmd": "git status", "cwd": "/r"}})
    assert gated == ("shell", {"cmd": "git status", "cwd": "/r"})
    assert matches(rule("sh*", {"match": {"cmd": {"glob": "git *"}}}), "bot", *gated, None)
    assert not matches(rule("sh*", {"match": {"cmd": {"glob": "rm *"}}}), "bot", *gated, None)
    assert not matches(rule("shell", {"exact": {"cmd": "git status"}}), "bot", *gated, None)
    assert not matches(rule("shell", None), "other-bot", *gated, None)
    assert matches(rule("shell", None, agent="*"), "other-bot", *gated, None)
    assert subject("Deploy", "Release", {"tag": 1}) == ("Release", {"tag": 1})
    with pytest.raises(ValueError, match="argument pattern"):
        check_pattern({"cmd": "x"})


async def test_the_default_rule_is_exact_even_for_glob_characters(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        first, _ = await broker.ask(approval(text="rm *.tmp", payload=None, channels=["web"]))
        await broker.add_rule(**exactly(first), created_by="me")
        other, _ = await broker.ask(approval(text="rm a.tmp", payload=None, channels=["web"]))
        same, _ = await broker.ask(
            approval(text="rm *.tmp", payload=None, channels=["web"], idempotency_key="k")
        )
        assert (other.status, same.status) == (Status.PENDING, Status.ANSWERED)


async def test_the_default_rule_for_a_gated_call_binds_its_action_line_too(state_dir: Path) -> None:
    """A gated call's subject is its tool, so the rule binds the action line the person read as well:
    the identical call is the rule's, the same call worded otherwise is asked of a person."""
    call = {"tool": "Bash", "arguments": {"command": "rm *.log"}}
    async with running(state_dir) as rt:
        broker = await rt.broker()
        first, _ = await broker.ask(approval(text="Run `rm *.log`", payload=call, channels=["web"]))
        await broker.add_rule(**exactly(first), created_by="me")
        same, _ = await broker.ask(
            approval(text="Run `rm *.log`", payload=call, channels=["web"], idempotency_key="same")
        )
        reworded, _ = await broker.ask(
            approval(text="Tidy the logs", payload=call, channels=["web"], idempotency_key="reworded")
        )
        assert (same.status, same.channel, reworded.status) == (Status.ANSWERED, "rule", Status.PENDING)


# ------------------------------------------------------------------------------ the kill switch


async def test_pause_denies_new_approvals_freezes_expiry_and_resume_pushes_it(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        await broker.add_rule(agent="*", tool="Ship*", arguments=None, created_by="me")
        waiting, _ = await broker.ask(approval(channels=["web"], timeout_seconds=60))
        assert waiting.expires_at is not None
        await broker.pause("alice", "deploy freeze")

        denied, _ = await broker.ask(approval(text="Ship it", channels=["web"]))  # the rule does not fire
        assert (denied.status, denied.approved, denied.comment) == (
            Status.CANCELLED,
            False,
            "paused by alice: deploy freeze",
        )
        question, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Lunch?", channels=["web"], owner="bot")
        )
        assert question.status == Status.PENDING

        # two minutes on: the deadline has passed, but nothing expires while paused
        clock = now
        monkeypatch.setattr(broker_module, "now", lambda: clock() + 120)
        monkeypatch.setattr(broker_rules, "now", lambda: clock() + 120)
        assert await broker.store.due_expiries(clock() + 120) == [waiting.id]
        assert (await broker.expire(waiting.id)).status == Status.PENDING
        assert (await broker.wait(waiting.id, 0.2)).status == Status.PENDING
        seconds, moved = await broker.resume("bob")
        assert moved == 2 and seconds >= 120  # the approval and the question
        pushed = await broker.get_or_raise(waiting.id)
        assert pushed.expires_at == waiting.expires_at + seconds
        assert await broker.store.due_expiries(clock() + 120) == []  # not due yet: pushed back

        events = [(a.event, a.actor) for a in await broker.history.audit() if a.request_id is None]
        # (after the server's start: its receipt key published, receipts.md)
        assert events[-3:] == [("rule_added", "me"), ("paused", "alice"), ("resumed", "bob")]
        assert check_requests(await broker.history.all_requests(), await broker.history.audit()) == []


async def test_while_paused_a_reply_or_a_cancel_past_the_deadline_counts_and_nothing_expires(
    state_dir: Path,
) -> None:
    """Deadlines wait while approvals are paused: a reply that arrives past the (frozen) deadline is
    the answer, and a cancel cancels; neither expires the request. Without the pause, as before."""
    async with running(state_dir) as rt:
        broker = await rt.broker()
        answered, _ = await broker.ask(approval(channels=["web"], timeout_seconds=60))
        cancelled, _ = await broker.ask(approval(text="Ship v4", channels=["web"], timeout_seconds=60))
        unpaused, _ = await broker.ask(approval(text="Ship v5", channels=["web"], timeout_seconds=60))
        await broker.pause("alice", "deploy freeze")
        for request in (answered, cancelled):  # past their deadlines, as if time had passed
            await rewrite_expiry(state_dir, request.id, now() - 1)
        reply = Reply(channel="web", responder="web inbox user", decision="approve")
        settled = await broker.resolve(answered.id, reply)
        assert settled.won and settled.request.status == Status.ANSWERED and settled.request.approved
        gone = await broker.cancel(cancelled.id, "not needed", "agent")
        assert gone.status == Status.CANCELLED and gone.comment == "not needed"
        await broker.resume("bob")
        await rewrite_expiry(state_dir, unpaused.id, now() - 1)
        late = await broker.resolve(unpaused.id, reply)
        assert not late.won and late.request.status == Status.EXPIRED


async def test_of_two_resumes_at_once_one_pushes_the_deadlines_and_the_other_finds_it_not_paused(
    tmp_path: Path,
) -> None:
    """Two processes (each a broker on its own store of one database) resume at the same moment,
    both having read the pause: the deadlines move back once, by the time paused, with one
    ``resumed`` row; the other resume says approvals are not paused."""
    async with channel_broker(tmp_path, lambda hub: TestChannel("push", hub=hub)) as first:
        waiting, _ = await first.ask(approval(channels=["push"], timeout_seconds=60))
        assert waiting.expires_at is not None
        await first.pause("alice", "deploy freeze")
        async with meeting_stores(tmp_path / "hitl.sqlite3", 2, "_hitl", "paused") as stores:
            brokers = [Broker(store, {}, AskDefaults({}, {}), state_dir=tmp_path) for store in stores]
            resumed: list[tuple[float, int]] = []
            refused: list[str] = []

            async def resume(broker: Broker, actor: str) -> None:
                try:
                    resumed.append(await broker.resume(actor))
                except BrokerError as exc:
                    refused.append(str(exc))

            async with anyio.create_task_group() as tg:
                tg.start_soon(resume, brokers[0], "bob")
                tg.start_soon(resume, brokers[1], "carol")
        ((seconds, moved),) = resumed
        assert moved == 1 and refused == ["approvals are not paused"]
        assert (await first.get_or_raise(waiting.id)).expires_at == waiting.expires_at + seconds
        assert await first.paused() is None
        events = [a.event for a in await first.history.audit() if a.request_id is None]
        assert events == ["paused", "resumed"]


async def test_of_two_pauses_at_once_the_first_stands_and_the_other_is_refused(tmp_path: Path) -> None:
    async with meeting_stores(tmp_path / "hitl.sqlite3", 2, "_hitl", "paused") as stores:
        brokers = [Broker(store, {}, AskDefaults({}, {}), state_dir=tmp_path) for store in stores]
        paused: list[broker_rules.Pause] = []
        refused: list[str] = []

        async def pause(broker: Broker, actor: str) -> None:
            try:
                paused.append(await broker.pause(actor, f"{actor}'s freeze"))
            except BrokerError as exc:
                refused.append(str(exc))

        async with anyio.create_task_group() as tg:
            tg.start_soon(pause, brokers[0], "alice")
            tg.start_soon(pause, brokers[1], "bob")
        (kept,) = paused
        assert refused == [f"approvals are already {kept.words}"]
        assert await brokers[1].paused() == kept == await brokers[0].paused()
        assert [(a.event, a.actor) for a in await stores[0].audit()] == [("paused", kept.by)]


async def test_pause_and_resume_from_the_cli_and_the_tool_result_says_paused(
    tmp_path: Path, state_dir: Path
) -> None:
    assert (await hitl(state_dir, "pause", "--reason", "lunch"))[0] == 0
    code, _, err = await hitl(state_dir, "pause")
    assert code == 1 and "already paused by" in err
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with Client(bearer(f"http://127.0.0.1:{port}/mcp"), mode="legacy") as agent:
            result = await agent.call_tool("request_approval", DEPLOY)
            assert sc(result)["approved"] is False and sc(result)["comment"].endswith("(terminal): lunch")
            assert "approvals are paused by" in text_of(result) and "denied" not in text_of(result).lower()
            assert (await hitl(state_dir, "resume"))[0] == 0
            assert sc(await agent.call_tool("request_approval", DEPLOY))["status"] == "pending"


# ------------------------------------------------------------------------------ the inbox


async def test_batch_approves_the_plain_ones_and_leaves_high_risk_pending(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker: Broker = await rt.broker()
        plain = [(await broker.ask(approval(text=f"Step {n}", channels=["web"])))[0] for n in range(3)]
        risky, _ = await broker.ask(approval(text="Drop the table", risk="high", channels=["web"]))
        other, _ = await broker.ask(approval(owner="other", channels=["web"]))
        async with browser(rt) as person:
            inbox = (await person.get("/")).text
            assert "Approve all 3 from bot" in inbox
            page = (await person.get("/batch", params={"agent": "bot"})).text
            assert all(f'data-batch-id="{r.id}"' in page for r in plain)
            assert f'data-left-id="{risky.id}"' in page and f'data-batch-id="{risky.id}"' not in page
            ids = re.search(r'name="ids" value="([^"]*)"', page)
            assert ids
            form = {"csrf": csrf_of(page), "agent": "bot", "ids": ids.group(1) + f",{risky.id},{other.id}"}
            assert (await person.post("/batch", data=form)).status_code == 422  # no confirmation
            r = await person.post(
                "/batch", data={**form, "confirm": "yes"}, headers={"Accept": "application/json"}
            )
            assert r.status_code == 200 and sorted(r.json()["approved"]) == sorted(p.id for p in plain)
        for request in plain:
            settled = await broker.get_or_raise(request.id)
            assert settled.approved is True and settled.responder == "operator"
        assert (await broker.get_or_raise(risky.id)).status == Status.PENDING
        assert (await broker.get_or_raise(other.id)).status == Status.PENDING
        (row,) = [a for a in await broker.history.audit() if a.event == "batch_approved"]
        assert sorted(row.data["ids"]) == sorted(p.id for p in plain) and row.actor == "operator"


async def test_the_inbox_revokes_pauses_and_resumes_only_with_its_csrf_token(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        rule = await broker.add_rule(agent="*", tool="*", arguments=None, created_by="me", uses=3)
        async with browser(rt) as person:
            page = (await person.get("/rules")).text
            assert "added by me" in page and "3 uses left" in page and "Fired 0 times" in page
            assert (await person.post(f"/rules/{rule.id}/revoke", data={})).status_code == 403
            assert (await person.post("/pause", data={})).status_code == 403
            csrf = csrf_of(page)
            assert (await person.post(f"/rules/{rule.id}/revoke", data={"csrf": csrf})).status_code == 303
            assert (await person.post("/pause", data={"csrf": csrf, "reason": "away"})).status_code == 303
            assert "Approvals are paused" in (await person.get("/rules")).text
            assert (await broker.paused()) is not None
            assert (await person.post("/resume", data={"csrf": csrf})).status_code == 303
        assert (await broker.paused()) is None
        (revoked,) = await broker.rules()
        assert revoked.revoked_by == "operator" and not revoked.live(now())
        events = [(a.event, a.actor) for a in await broker.history.audit()]
        assert ("rule_revoked", "operator") in events and ("resumed", "operator") in events


async def test_a_high_risk_rule_from_the_form_needs_its_confirmation(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        risky, _ = await broker.ask(approval(risk="high", channels=["web"]))
        async with browser(rt) as person:
            page = (await person.get(f"/requests/{risky.id}/remember")).text
            form = {
                "csrf": csrf_of(page),
                "agent": "bot",
                "tool": "Deploy v3",
                "arguments": "null",
                "hours": "1",
            }
            r = await person.post(f"/requests/{risky.id}/remember", data={**form, "high_risk": "yes"})
            assert r.status_code == 422 and "confirmation" in r.text
            assert await broker.rules() == []
            r = await person.post(
                f"/requests/{risky.id}/remember",
                data={**form, "high_risk": "yes", "confirm_high_risk": "yes"},
            )
            assert r.status_code == 303
        (rule,) = await broker.rules()
        assert rule.high_risk and (await broker.get_or_raise(risky.id)).approved is True


# ------------------------------------------------------------------------------ one tap in a chat


async def test_slack_approve_and_remember_makes_the_default_rule(
    state_dir: Path, slack_standin: tuple[Any, str]
) -> None:
    from tests.channels.test_slack import SAM, buttons, delivered, form, http_config
    from tests.support.slack import sign

    stand, url = slack_standin
    async with running(state_dir, make_config(http_config(url))) as rt, api_client(rt) as api:
        broker = await rt.broker()
        request, _ = await broker.ask(approval(channels=["slack"]))
        risky, _ = await broker.ask(approval(text="Drop it", risk="high", channels=["slack"]))
        assert "approve_remember" not in buttons(await delivered(stand, broker, risky))
        body = form(stand.click(await delivered(stand, broker, request), SAM, "approve_remember"))
        response = await api.post("/webhooks/slack/interactivity", content=body, headers=sign(body))
        assert response.status_code == 200
        done = await broker.wait(request.id, 10)
        assert done.approved is True and done.responder == "@sam (U0SAM)"
        (rule,) = await broker.rules()
        assert (rule.agent, rule.tool, rule.arguments, rule.high_risk) == (
            "bot",
            "Deploy v3",
            {"exact": {"tag": "v3"}},
            False,
        )
        assert rule.created_by == "@sam (U0SAM) via slack" and rule.uses_left is None
        assert rule.expires_at is not None and abs(rule.expires_at - now() - 24 * 3600) < 60
        again, _ = await broker.ask(approval(channels=["slack"], idempotency_key="again"))
        assert again.responder == f"rule {rule.id}" and again.approved is True


async def test_telegram_approve_and_remember_makes_the_default_rule(tmp_path: Path) -> None:
    from tests.channels.test_telegram import delivered, tg, tg_config
    from tests.support.harness import channel_broker
    from tests.support.serve import serving
    from tests.support.telegram_standin import SAM, TelegramStandin

    stand = TelegramStandin()
    async with serving(stand.app) as url, channel_broker(tmp_path, tg(tg_config(url))) as broker:
        try:
            request, _ = await broker.ask(approval())
            message = await delivered(stand, broker, request)
            stand.press(message, "🔁 Approve & remember 24 h", SAM)
            done = await broker.wait(request.id, 10)
            assert done.approved is True and done.channel == "telegram"
            (rule,) = await broker.rules()
            assert (rule.tool, rule.arguments, rule.high_risk) == (
                "Deploy v3",
                {"exact": {"tag": "v3"}},
                False,
            )
            assert rule.created_by == "@sam (1001) via telegram"
            risky, _ = await broker.ask(approval(text="Drop it", risk="high"))
            labels = [b["text"] for b in (await delivered(stand, broker, risky)).buttons()]
            assert labels == ["✅ Approve", "⛔ Deny"]  # no one-tap rule for high risk
        finally:
            stand.close()


async def rewrite_expiry(state_dir: Path, request_id: str, expires_at: float) -> None:
    """Move a request's deadline behind the store's back (the SQLite file of ``running``)."""
    import sqlite3

    from hitl_mcp.store.select import DB_FILE

    db = sqlite3.connect(state_dir / DB_FILE, isolation_level=None)
    try:
        db.execute("UPDATE requests SET expires_at = ? WHERE id = ?", (expires_at, request_id))
    finally:
        db.close()
