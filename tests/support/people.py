"""People on a channel, for each channel's suite: a person's answer is credited by the identity the
channel verified (never by the display text), counts once in a quorum, and follows a delegation.

``await credited(broker, "slack", {"olive": "U0SAM", "backup": "U0ANA"}, vote)`` asks an approval that
needs both ``olive`` and ``lead``, with ``lead`` away (delegated to ``backup``); ``vote(request, who)``
presses Approve on the channel as the person ``who`` (``olive`` twice, then ``backup``) and returns once
the channel has handed the reply to the broker (or refused it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import pytest

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.core.delegation import Delegation
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.store import Engine

Vote = Callable[[Request, str], Awaitable[None]]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine | None]:
    """None (``channel_broker``'s SQLite), or an open PostgreSQL store on a throwaway database."""
    if request.param == "sqlite":
        yield None
        return
    from hitl_mcp.store.postgres import PostgresStore

    cluster = request.getfixturevalue("postgres_cluster")
    url = await cluster.create_database()
    store = PostgresStore(url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
        await cluster.drop_database(url)


def people_on(broker: Broker, channel: str, ids: Mapping[str, str], key: str | None = None) -> None:
    """``people:`` with ``olive``, ``lead`` (nobody on this channel) and ``backup``, each known by
    ``ids`` on ``channel`` (under ``key`` when the people key is not the channel's name); ``lead``
    is away until tomorrow, ``backup`` stands in."""
    people = {"lead": {"elsewhere": "lead-id"}, **{p: {key or channel: i} for p, i in ids.items()}}
    types = {name: ch.type or name for name, ch in broker.channels.items()}
    until = now() + 86400
    broker.policy = Policy(
        people=people,
        types=types,
        delegations=[Delegation.model_validate({"from": "lead", "to": "backup", "until": until})],
    )


async def ask_both(broker: Broker, channel: str, payload: object = None) -> Request:
    request, _ = await broker.ask(
        AskSpec(
            kind=Kind.APPROVAL,
            text="Rotate the prod keys",
            payload=payload,
            channels=[channel],
            approvals=Quorum(required=2, of=["olive", "lead"]),
        )
    )
    return request


async def credited(
    broker: Broker, channel: str, ids: Mapping[str, str], vote: Vote, key: str | None = None
) -> Request:
    """Olive's vote counts as hers (once: her second is refused), backup's fills lead's seat; returns
    the request, approved by both."""
    people_on(broker, channel, ids, key)
    request = await ask_both(broker, channel)
    await vote(request, "olive")
    once = await broker.get_or_raise(request.id)
    assert once.status == Status.PENDING
    assert [(v.person, v.on_behalf_of, v.channel) for v in once.votes] == [("olive", None, channel)]
    await vote(request, "olive")  # again: already voted
    again = await broker.get_or_raise(request.id)
    assert again.status == Status.PENDING and len(again.votes) == 1
    await vote(request, "backup")
    done = await broker.wait(request.id, 10)
    assert done.status == Status.ANSWERED and done.approved is True, done
    assert [(v.person, v.on_behalf_of) for v in done.votes] == [("olive", None), ("backup", "lead")]
    assert (done.person, done.on_behalf_of) == ("backup", "lead")
    return done


async def session_of(state_dir: Path, person: str, port: int, token: str) -> dict[str, str]:
    """A person's inbox session on the server in ``state_dir`` (SQLite), as a passkey sign-in leaves
    it: the cookie and CSRF headers a request needs to be theirs."""
    import secrets

    from hitl_mcp.store.select import DB_FILE
    from hitl_mcp.store.sqlite import SqliteStore
    from hitl_mcp.web.auth import WebAuth
    from hitl_mcp.web.sessions import digest

    session_id = secrets.token_urlsafe(32)
    store = SqliteStore(state_dir / DB_FILE)
    await store.open()
    try:
        await store.add_session(digest(session_id), now() + 3600, None, person)
    finally:
        await store.close()
    csrf = WebAuth(token, "test").csrf_for(session_id)
    return {"Cookie": f"hitl_session_{port}={session_id}", "X-CSRF-Token": csrf, "Authorization": ""}
