"""Escalation ladders and people: steps are durable rows, run once when due (by whichever process gets
there first), dropped when the request settles; an answer is credited to the person.

Real broker, real SQLite store, the kit's ``TestChannel``. A step "later" is reached without waiting:
``run_due_steps`` takes the time to run at (the injectable clock), as the outbox loop passes ``now()``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskDefaults, AskSpec, Broker
from hitl_mcp.channels.base import Channel, ChannelConfig, Counted, Delivery
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core import delegation
from hitl_mcp.core.delegation import Delegation
from hitl_mcp.core.errors import UnknownChannel
from hitl_mcp.core.escalation import TERMINAL_CHANNEL, Choice, Policy
from hitl_mcp.core.ladders import LadderConfig
from hitl_mcp.core.models import Kind, Reply, Request, Risk, Status, now
from hitl_mcp.core.quorum import Quorum
from tests.support.events import until
from tests.support.harness import channel_broker, watching

pytestmark = pytest.mark.anyio

PEOPLE = {"owner": {"push": "U1", "testing": "owner-everywhere"}, "backup": {"mail": "b@example.com"}}


def ladder(*steps: dict[str, Any], on_timeout: str = "expire") -> LadderConfig:
    return LadderConfig.model_validate({"steps": list(steps), "on_timeout": on_timeout})


def use(broker: Broker, *steps: dict[str, Any], on_timeout: str = "expire") -> None:
    """Give the running broker people and a ladder named ``default`` (what an unset tool follows)."""
    broker.policy = Policy(
        people=PEOPLE,
        ladders={"default": ladder(*steps, on_timeout=on_timeout)} if steps else {},
        types={name: "testing" for name in broker.channels},
    )


def push(hub: Any) -> TestChannel:
    return TestChannel("push", hub=hub)


def mail(hub: Any) -> TestChannel:
    return TestChannel("mail", hub=hub)


async def events(broker: Broker, request_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(row.event, row.data) for row in await broker.history.audit(request_id)]


async def sent_on(broker: Broker, channel: TestChannel, request_id: str, count: int = 1) -> None:
    with watching(broker, request_id) as changes:
        await until(lambda: channel.sent.count(request_id) >= count, changes)


async def test_push_first_then_mail_unless_answered_in_time(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, also=[mail]) as broker:
        use(
            broker,
            {"after": 0, "notify": ["push"]},
            {"after": "15s", "notify": ["mail"], "unless": "answered"},
        )
        phone, inbox = broker.channels["push"], broker.channels["mail"]
        assert isinstance(phone, TestChannel) and isinstance(inbox, TestChannel)

        # answered on the phone in time: the mail step is cancelled, in the settling transaction
        quick, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Deploy now?"))
        assert quick.channels == ["push"]
        await sent_on(broker, phone, quick.id)
        await phone.reply(quick.id, text="yes")
        steps = {s.number: s.status for s in await broker.store.steps(quick.id)}
        assert steps == {1: "done", 2: "cancelled"}
        assert ("steps_cancelled", {"steps": ["2: notify mail"]}) in await events(broker, quick.id)
        assert await broker.store.run_due_steps(now() + 3600) == []  # long after: still not sent
        assert quick.id not in inbox.sent

        # nobody answers: 15 seconds on, the mail goes out too
        slow, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Roll back?"))
        await sent_on(broker, phone, slow.id)
        ran = await broker.store.run_due_steps(slow.created_at + 15)
        assert [(s.request_id, s.number, s.channels) for s in ran] == [(slow.id, 2, ["mail"])]
        broker.outbox.kick()
        await sent_on(broker, inbox, slow.id)
        request = await broker.get_or_raise(slow.id)
        assert request.channels == ["push", "mail"]  # the trail and the retractions cover it
        sent = [d for e, d in await events(broker, slow.id) if e == "step_sent"]
        assert sent == [
            {"step": 1, "action": "notify push", "channels": []},  # already asked there
            {"step": 2, "action": "notify mail", "channels": ["mail"]},
        ]
        await inbox.reply(slow.id, text="no")
        with watching(broker, slow.id) as changes:
            await until(
                lambda: {r[0] for r in phone.retracted + inbox.retracted} == {quick.id, slow.id}, changes
            )


async def test_a_step_is_due_on_its_own_through_the_outbox_loop(tmp_path: Path) -> None:
    """``at: 50%`` of a 0.6 s window: the loop runs it at 0.3 s, before the expiry."""
    async with channel_broker(tmp_path, push, lifetime=0.6) as broker:
        use(broker, {"at": "50%", "remind": True})
        phone = broker.channels["push"]
        assert isinstance(phone, TestChannel)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table"))
        (step,) = await broker.store.steps(request.id)
        assert step.due_at == pytest.approx(request.created_at + 0.3)
        with watching(broker, request.id) as changes:
            await until(lambda: phone.reminded, changes)
        assert phone.reminded == [(request.id, "msg-1")]  # a reply to the first message
        settled = await broker.wait(request.id, 5)
        assert settled.status == Status.EXPIRED and settled.approved is False
        rows = await broker.history.audit(request.id)
        at = {row.event: row.at for row in rows}
        assert at["step_sent"] < at["reminded"] < at["expired"]


async def test_at_a_share_of_the_window(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker, {"at": "50%", "remind": True}, {"at": "90%", "notify_people": ["owner"]})
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Ship?", timeout_seconds=1000))
        due = [s.due_at - request.created_at for s in await broker.store.steps(request.id)]
        assert due == [pytest.approx(500), pytest.approx(900)]


async def test_a_reminder_across_a_restart_is_neither_lost_nor_doubled(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite3"
    async with channel_broker(tmp_path, push, db=db) as broker:
        use(broker, {"after": "10m", "remind": True})
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Still there?"))
        await sent_on(broker, broker.channels["push"], request.id)  # type: ignore[arg-type]
    # the process is gone; ten minutes on, a new one starts on the same database
    async with channel_broker(tmp_path, push, db=db) as broker:
        phone = broker.channels["push"]
        assert isinstance(phone, TestChannel)
        assert [s.status for s in await broker.store.steps(request.id)] == ["scheduled"]
        later = request.created_at + 600
        assert [s.number for s in await broker.store.run_due_steps(later)] == [1]
        assert await broker.store.run_due_steps(later + 1) == []  # run once, committed with its sends
        broker.outbox.kick()
        with watching(broker, request.id) as changes:
            await until(lambda: phone.reminded, changes)
        assert phone.reminded == [(request.id, "msg-1")]
    async with channel_broker(tmp_path, push, db=db) as broker:
        assert await broker.store.run_due_steps(later + 3600) == []
        reminders = [d for d in await broker.store.deliveries(request.id) if d.action.startswith("remind")]
        assert [(d.action, d.status) for d in reminders] == [("remind#1", "sent")]
        assert [e for e, _ in await events(broker, request.id)].count("reminded") == 1


async def test_keep_pending_never_expires_and_never_approves(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker, {"at": "50%", "remind": True}, on_timeout="keep_pending")
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys", timeout_seconds=60))
        assert request.expires_at is None
        (step,) = await broker.store.steps(request.id)
        assert step.due_at == pytest.approx(request.created_at + 30)  # the window still places `at`
        far = request.created_at + 86400 * 365
        assert await broker.store.due_expiries(far) == []  # the sweep never takes it
        waited = await broker.wait(request.id, 0.2)  # a waiter, too, stops only for its own budget
        assert waited.status == Status.PENDING and waited.approved is None


async def test_without_a_ladder_nothing_is_scheduled(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Plain?"))
        assert await broker.store.steps(request.id) == []
        assert request.expires_at is not None


async def test_a_risk_picks_its_own_ladder_and_none_opts_out(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker, {"after": "1h", "remind": True})
        broker.policy.ladders = {
            **broker.policy.ladders,
            "urgent": ladder({"after": "1m", "remind": True}),
            "none": ladder({"after": "1s", "remind": True}),  # `none` still means no ladder
        }
        broker.policy.choices = {
            Kind.QUESTION: Choice(escalation="none"),
            (Kind.APPROVAL, "high"): Choice(escalation="urgent"),
            (Kind.APPROVAL, "medium"): Choice(escalation="none"),  # also an approval that names no risk
        }
        high, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="rm -rf", risk="high"))
        low, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="ls", risk="low"))
        unrated, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="du"))
        question, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Lunch?"))
        assert [round(s.due_at - high.created_at) for s in await broker.store.steps(high.id)] == [60]
        assert [round(s.due_at - low.created_at) for s in await broker.store.steps(low.id)] == [3600]
        assert await broker.store.steps(unrated.id) == []
        assert await broker.store.steps(question.id) == []


class Form(TestChannel):
    """The host's own form (as the elicitation channel is): the gate never asks there."""

    is_form = True


def form(hub: Any) -> TestChannel:
    return Form("form", hub=hub)


async def test_the_gate_s_ladder_never_adds_the_host_s_form(tmp_path: Path) -> None:
    """An ask with ``forms=False`` (the gate's): a step's form channel is dropped, and a notify step
    left with no channel is not scheduled; its reminders still are."""
    async with channel_broker(tmp_path, push, also=[mail, form]) as broker:
        broker.policy = Policy(
            people={**PEOPLE, "dev": {"form": "dev"}},  # dev is known only at the host's window
            ladders={
                "default": ladder(
                    {"after": "1m", "remind": True},
                    {"after": "2m", "notify": ["form"]},
                    {"after": "3m", "notify_people": ["dev"]},
                    {"after": "4m", "notify": ["form", "mail"]},
                )
            },
            types={"push": "testing", "mail": "testing", "form": "elicitation"},
        )
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="rm -rf build", forms=False))
        steps = [(s.number, s.action, s.channels, s.label) for s in await broker.store.steps(request.id)]
        assert steps == [(1, "remind", [], "remind"), (4, "notify", ["mail"], "notify form, mail")]
        await broker.cancel(request.id, "not needed", "agent")
        assert ("steps_cancelled", {"steps": ["1: remind", "4: notify form, mail"]}) in await events(
            broker, request.id
        )


async def test_at_a_share_needs_a_window(tmp_path: Path) -> None:
    """A broker whose defaults give questions no timeout: an ``at`` step has no window to share."""
    async with channel_broker(tmp_path, push) as broker:
        use(broker, {"at": "50%", "remind": True})
        broker.defaults = AskDefaults(channels=broker.defaults.channels, timeouts={})
        with pytest.raises(
            UnknownChannel, match=r"^an 'at: N%' escalation step needs a timeout to take a share of$"
        ):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="When?"))
        timed, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="When?", timeout_seconds=100))
        assert [s.due_at - timed.created_at for s in await broker.store.steps(timed.id)] == [
            pytest.approx(50)
        ]


# --- people --------------------------------------------------------------------------------------


async def test_an_answer_is_credited_to_the_person(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker)
        phone = broker.channels["push"]
        assert isinstance(phone, TestChannel)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Who?"))
        await phone.reply(request.id, responder="u1", text="me")  # identities compare without case
        await phone.reply(request.id, responder="stranger", text="late")
        done = await broker.get_or_raise(request.id)
        assert (done.responder, done.channel, done.person) == ("u1", "push", "owner")
        answered = [
            (r.actor, r.data) for r in await broker.history.audit(request.id) if r.event == "answered"
        ]
        assert answered == [("u1", {"channel": "push", "person": "owner", "answer": "me"})]
        rejected = [r for r in await broker.history.audit(request.id) if r.event == "reply_rejected"]
        assert rejected[0].actor == "stranger" and "person" not in rejected[0].data


async def test_to_asks_people_on_the_channels_where_they_have_an_address(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, also=[mail]) as broker:
        use(broker)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Backup?", to=["backup"]))
        assert request.channels == ["mail"]
        both, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="All?", to=["backup", "owner"]))
        assert both.channels == ["push", "mail"]
        # an identity keyed by a channel type reaches every channel of that type
        owner, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Owner?", to=["owner"]))
        assert owner.channels == ["push", "mail"]
        with pytest.raises(UnknownChannel, match=r"^unknown person 'nobody'; people: owner, backup$"):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="?", to=["nobody"]))
        with pytest.raises(
            UnknownChannel, match=r"^unknown person 'nobody', 'ghost'; people: owner, backup$"
        ):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="?", to=["nobody", "ghost"]))
        # defaults per tool: the defaults' channels and the defaults' people
        broker.policy.choices = {Kind.QUESTION: Choice(to=["backup"])}
        default, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Default people?"))
        assert default.channels == ["push", "mail"] and default.to == ["backup"]
        # per risk: the risk's people over the tool's (even none at all)
        broker.policy.choices = {
            Kind.APPROVAL: Choice(to=["owner"]),
            (Kind.APPROVAL, "high"): Choice(to=["backup"]),
            (Kind.APPROVAL, "low"): Choice(to=[]),
        }
        high, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop it?", risk="high"))
        assert (high.to, high.channels) == (["backup"], ["push", "mail"])
        medium, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart?"))
        assert medium.to == ["owner"]
        low, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Read?", risk="low"))
        assert (low.to, low.channels) == (None, ["push"])


async def test_no_one_to_ask_is_said_in_words(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        # no people configured at all
        broker.policy = Policy(types={"push": "testing"})
        with pytest.raises(UnknownChannel, match=r"^unknown person 'owner'; people: \(none configured\)$"):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="?", to=["owner"]))
        # people known only at the terminal, and no inbox to sign in to
        broker.policy = Policy(
            people={"carol": {"terminal": "carol"}, "dave": {"terminal": "dave"}},
            types={"push": "testing"},
        )
        with pytest.raises(UnknownChannel, match=r"^'carol' has no identity on any configured channel$"):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="?", to=["carol"]))
        with pytest.raises(
            UnknownChannel, match=r"^'carol', 'dave' have no identity on any configured channel$"
        ):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="?", to=["carol", "dave"]))


async def test_a_delegate_the_config_no_longer_names_is_reached_nowhere(tmp_path: Path) -> None:
    """A run-time delegation outlives a config that drops its delegate: the ask says so in words."""
    async with channel_broker(tmp_path, push) as broker:
        use(broker)
        away = Delegation.model_validate({"from": "owner", "to": "carol", "until": now() + 3600})
        await delegation.store(broker.store, [away])
        with pytest.raises(UnknownChannel, match=r"^'carol' has no identity on any configured channel$"):
            await broker.ask(AskSpec(kind=Kind.QUESTION, text="?", to=["owner"]))


async def test_notify_people_reaches_their_channels(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, also=[mail]) as broker:
        use(
            broker,
            {"after": "30m", "notify_people": ["backup"]},
            {"after": "50m", "notify_people": ["owner", "backup"]},
        )
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Anyone?"))
        (ran,) = await broker.store.run_due_steps(request.created_at + 1800)
        assert (ran.label, ran.channels) == ("notify backup", ["mail"])
        broker.outbox.kick()
        await sent_on(broker, broker.channels["mail"], request.id)  # type: ignore[arg-type]
        (later,) = await broker.store.run_due_steps(request.created_at + 3000)
        assert (later.label, later.channels) == ("notify owner, backup", [])  # both already sent it


async def test_a_settled_request_drops_its_queued_reminders(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker, {"after": "1m", "remind": True})
        phone = broker.channels["push"]
        assert isinstance(phone, TestChannel)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Now?"))
        await sent_on(broker, phone, request.id)
        await broker.store.run_due_steps(request.created_at + 60)  # queued, not yet attempted
        await broker.cancel(request.id, "not needed", "agent")
        reminders = [d for d in await broker.store.deliveries(request.id) if d.action == "remind#1"]
        assert [d.status for d in reminders] == ["skipped"]


async def test_an_answer_at_the_terminal_or_in_the_inbox_is_credited_by_name(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        broker.policy = Policy(
            people={"owner": {"terminal": "alice", "push": "U1"}, "backup": {"push": "U2"}},
            types={"push": "testing", "inbox": "web"},
        )
        # the CLI records the OS user: the person whose `terminal` it is
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Who?"))
        cli = Reply(channel=TERMINAL_CHANNEL, responder="alice (terminal)", identity="alice", text="me")
        await broker.resolve(request.id, cli)
        assert (await broker.get_or_raise(request.id)).person == "owner"
        # the inbox gives the name signed in: a name that is no person (any more) credits no one
        signed_in, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Who else?"))
        await broker.resolve(
            signed_in.id, Reply(channel="inbox", responder="ghost", identity="ghost", text="me")
        )
        assert (await broker.get_or_raise(signed_in.id)).person is None
        known, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="And you?"))
        await broker.resolve(
            known.id, Reply(channel="inbox", responder="backup", identity="backup", text="me")
        )
        assert (await broker.get_or_raise(known.id)).person == "backup"


async def test_a_delegate_for_two_approvers_takes_the_seat_still_free(tmp_path: Path) -> None:
    """owner and lead are both away to backup; owner votes anyway: backup's vote is lead's."""
    async with channel_broker(tmp_path, push) as broker:
        until = now() + 3600
        broker.policy = Policy(
            people={"owner": {"push": "U1"}, "lead": {"push": "U3"}, "backup": {"push": "U2"}},
            types={"push": "testing"},
            delegations=[
                Delegation.model_validate({"from": "owner", "to": "backup", "until": until}),
                Delegation.model_validate({"from": "lead", "to": "backup", "until": until}),
            ],
        )
        phone = broker.channels["push"]
        assert isinstance(phone, TestChannel)
        two = Quorum(required=2, of=["owner", "lead"])
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys", approvals=two))
        assert isinstance(await phone.reply(request.id, "U1", decision="approve"), Counted)
        await phone.reply(request.id, "U2", decision="approve")
        settled = await broker.get_or_raise(request.id)
        assert settled.status == Status.ANSWERED and settled.approved is True
        assert [(v.person, v.on_behalf_of) for v in settled.votes] == [("owner", None), ("backup", "lead")]


def test_asked_of_is_everyone_a_request_may_reach() -> None:
    """Who may answer in the inbox: the request's ``to``, its quorum's approvers and the people its
    ladder (by kind and risk) goes on to."""
    policy = Policy(
        people={name: {"push": name} for name in ("owner", "backup", "lead", "carol", "dave")},
        ladders={
            "default": ladder({"after": "1h", "notify_people": ["carol"]}),
            "urgent": ladder({"after": "1m", "notify_people": ["dave"]}, {"after": "2m", "remind": True}),
        },
        types={"push": "testing"},
        choices={
            Kind.APPROVAL: Choice(escalation="urgent"),
            (Kind.QUESTION, "high"): Choice(escalation="urgent"),
        },
    )

    def asked(kind: Kind, risk: Risk | None = None, **more: Any) -> list[str]:
        return policy.asked_of(Request(id="r1", kind=kind, text="?", created_at=now(), risk=risk, **more))

    assert asked(Kind.QUESTION, to=["owner"]) == ["owner", "carol"]
    assert asked(Kind.QUESTION, "high", to=["owner"]) == ["owner", "dave"]
    assert asked(Kind.APPROVAL, to=["owner"], approvals=Quorum(required=1, of=["backup", "lead"])) == [
        "owner",
        "backup",
        "lead",
        "dave",
    ]
    policy.choices = {Kind.QUESTION: Choice(escalation="none")}
    assert asked(Kind.QUESTION, to=["owner"]) == ["owner"]


async def test_a_risk_s_approvals_need_a_passkey_where_people_hold_them(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use(broker)
        broker.policy.step_up = frozenset({"high", "medium"})

        async def step_up(kind: Kind, risk: Risk | None) -> bool:
            request, _ = await broker.ask(AskSpec(kind=kind, text=f"{kind} {risk}?", risk=risk))
            return request.step_up

        assert await step_up(Kind.APPROVAL, "high") is True
        assert await step_up(Kind.APPROVAL, None) is True  # no risk: medium
        assert await step_up(Kind.APPROVAL, "low") is False
        assert await step_up(Kind.QUESTION, "high") is False
        broker.policy.people = {}  # no one to hold a passkey
        assert await step_up(Kind.APPROVAL, "high") is False


async def test_the_defaults_quorum_and_its_mistakes(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, also=[mail]) as broker:
        use(broker)
        broker.policy.choices = {
            Kind.APPROVAL: Choice(to=["owner", "backup"], approvals=Quorum(required=2)),
            (Kind.APPROVAL, "medium"): Choice(approvals=Quorum(required=1, of=["backup"])),
            (Kind.APPROVAL, "high"): Choice(to=["backup", "owner"], approvals=Quorum(required=2)),
        }
        low, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="ls", risk="low"))
        assert low.approvals == Quorum(required=2, of=["owner", "backup"])  # the tool's
        unrated, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="du"))
        assert unrated.approvals == Quorum(required=1, of=["backup"])  # no risk: medium's
        high, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="rm", risk="high"))
        assert high.approvals == Quorum(required=2, of=["backup", "owner"])  # of: the risk's people

        broker.policy.choices = {}
        with pytest.raises(
            UnknownChannel,
            match=r"^approvals: name the people who approve in `of`, or ask people with `to`$",
        ):
            await broker.ask(AskSpec(kind=Kind.APPROVAL, text="x", approvals=Quorum(required=1)))
        with pytest.raises(
            UnknownChannel, match=r"^approvals: unknown person 'nobody', 'ghost'; people: owner, backup$"
        ):
            await broker.ask(
                AskSpec(kind=Kind.APPROVAL, text="x", approvals=Quorum(required=1, of=["nobody", "ghost"]))
            )
        with pytest.raises(
            UnknownChannel, match=r"^approvals: 2 required, but only 1 person may approve \(owner\)$"
        ):
            await broker.ask(
                AskSpec(kind=Kind.APPROVAL, text="x", approvals=Quorum(required=2, of=["owner"]))
            )
        broker.policy.people = {}
        with pytest.raises(
            UnknownChannel, match=r"^approvals: unknown person 'owner'; people: \(none configured\)$"
        ):
            await broker.ask(
                AskSpec(kind=Kind.APPROVAL, text="x", approvals=Quorum(required=1, of=["owner"]))
            )


class Plain(Channel):
    """A channel with only ``deliver``: reminded by the kit's default."""

    type = "plain"

    def __init__(self) -> None:
        super().__init__("plain", ChannelConfig(type="plain"), hub=None)  # type: ignore[arg-type]
        self.texts: list[str] = []

    async def deliver(self, request: Request) -> Delivery:
        self.texts.append(request.text)
        return Delivery(ref=str(len(self.texts)))


async def test_the_default_reminder_sends_again_saying_still_waiting() -> None:
    channel = Plain()
    request = Request(id="r1", kind=Kind.QUESTION, text="Deploy?", created_at=now())
    first = await channel.deliver(request)
    again = await channel.remind(request, first, "remind#1:r1")
    assert channel.texts == ["Deploy?", "Still waiting: Deploy?"] and again.ref == "2"


# --- through the config and the tools ------------------------------------------------------------


async def test_the_tools_take_people_and_the_config_s_ladder(state_dir: Path) -> None:
    from mcp import Client

    from tests.conftest import make_config, running, sc
    from tests.web.test_inbox_pages import browser_like

    extra = """
people:
  owner: {terminal: owner}
escalation:
  default:
    steps: [{at: 50%, remind: true}]
    on_timeout: keep_pending
"""
    async with running(state_dir, make_config(extra)) as rt, Client(rt.build_mcp()) as client:
        out = sc(
            await client.call_tool("ask_user", {"question": "Ship?", "to": ["owner"], "wait_seconds": 0})
        )
        request = await (await rt.broker()).get_or_raise(out["request_id"])
        assert request.channels == ["web"] and request.expires_at is None
        (step,) = await (await rt.broker()).store.steps(request.id)
        assert step.due_at == pytest.approx(request.created_at + 86400 / 2)  # half of ask_user's 24h
        async with browser_like(rt, person="owner") as owner:  # signed in with a passkey
            assert (
                await owner.post(f"/api/requests/{request.id}/reply", json={"text": "yes"})
            ).status_code == 200
        answered = [r for r in await (await rt.broker()).history.audit(request.id) if r.event == "answered"]
        assert answered[0].actor == "owner" and answered[0].data["person"] == "owner"
        assert [s.status for s in await (await rt.broker()).store.steps(request.id)] == ["cancelled"]
        waited = sc(
            await client.call_tool("wait_for_response", {"request_id": request.id, "wait_seconds": 0})
        )
        assert (waited["responder"], waited["person"]) == ("owner", "owner")

        wrong = await client.call_tool("ask_user", {"question": "Who?", "to": ["nobody"], "wait_seconds": 0})
        assert wrong.is_error and "unknown person 'nobody'; people: owner" in wrong.content[0].text  # type: ignore[union-attr]
