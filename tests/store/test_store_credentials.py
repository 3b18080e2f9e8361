"""The store's credentials (agent tokens from ``hitl-mcp agent add``), on both engines: kept by their
SHA-256 only, one live per kind and name, each change an audit row; and the migration that made a
request's owner a principal (``stdio:<client>`` for what stdio hosts asked before)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hitl_mcp.core.models import Kind, Request, now
from hitl_mcp.core.principal import token_digest
from hitl_mcp.core.store import KeyConflict
from hitl_mcp.store.sqlite import MIGRATIONS, SqliteStore
from tests.store.test_store_contract import Engine, engine
from tests.support.settle import verify_audit

pytestmark = pytest.mark.anyio
__all__ = ["engine"]  # the fixture, once per engine


async def test_credentials_are_kept_by_digest_one_live_per_name_and_audited(engine: Engine) -> None:
    store = engine.store
    first = await store.add_credential("agent", "ci-bot", token_digest("t1" * 20), {}, "alice (terminal)")
    assert (first.kind, first.name, first.revoked_at) == ("agent", "ci-bot", None)
    with pytest.raises(KeyConflict):
        await store.add_credential("agent", "ci-bot", token_digest("t2" * 20), {}, "alice (terminal)")
    other = await engine.connect()  # another process sees it at once
    try:
        found = await other.credential("agent", token_digest("t1" * 20))
        assert found is not None and found.name == "ci-bot"
        assert await other.credential("agent", token_digest("wrong")) is None
        assert await other.credential("oauth", token_digest("t1" * 20)) is None  # another kind
    finally:
        await other.close()
    revoked = await store.revoke_credential("agent", "ci-bot", "bob (terminal)")
    assert revoked is not None and revoked.revoked_by == "bob (terminal)" and revoked.revoked_at
    assert await store.revoke_credential("agent", "ci-bot", "bob (terminal)") is None  # once
    assert await store.credential("agent", token_digest("t1" * 20)) is None
    again = await store.add_credential("agent", "ci-bot", token_digest("t3" * 20), {}, "alice (terminal)")
    assert [c.id for c in await store.credentials("agent")] == [again.id, first.id]  # newest first
    events = [(r.event, r.actor, r.data) for r in await store.audit() if r.event.startswith("agent_")]
    assert events == [
        ("agent_added", "alice (terminal)", {"name": "ci-bot"}),
        ("agent_revoked", "bob (terminal)", {"name": "ci-bot"}),
        ("agent_added", "alice (terminal)", {"name": "ci-bot"}),
    ]
    await verify_audit(store)


async def test_an_expired_credential_is_not_found_by_any_process(engine: Engine) -> None:
    """An OAuth code or token carries its expiry: past it the lookup refuses it, in every process,
    though nobody revoked it; one without an expiry lives until revoked."""
    store = engine.store
    at = now()
    await store.add_credential("oauth_access", "g1", token_digest("past" * 10), {}, "t", expires_at=at - 1)
    live_digest = token_digest("live" * 10)
    live = await store.add_credential("oauth_access", "g2", live_digest, {}, "t", expires_at=at + 60)
    assert live.expires_at == pytest.approx(at + 60)
    other = await engine.connect()
    try:
        assert await other.credential("oauth_access", token_digest("past" * 10)) is None
        found = await other.credential("oauth_access", token_digest("live" * 10))
        assert found is not None and found.name == "g2"
    finally:
        await other.close()
    assert [c.name for c in await store.credentials("oauth_access")] == ["g2", "g1"]  # listed, both


async def test_owners_from_before_principals_become_stdio_hosts(tmp_path: Path) -> None:
    """A database of the previous schema: its owners were stdio clients' names, its rules' agents
    too (``*`` stays any agent). After the migration they are ``stdio:<name>``."""
    path = tmp_path / "hitl.sqlite3"
    store = SqliteStore(path)
    await store.open()
    request = Request(id="a" * 16, kind=Kind.APPROVAL, text="Deploy", created_at=now(), owner="x")
    await store.create(request, None, [], {})
    await store.add_rule(
        agent="x",
        tool="Deploy",
        arguments=None,
        high_risk=False,
        created_by="t",
        expires_at=None,
        uses_left=1,
    )
    await store.add_rule(
        agent="*", tool="Other", arguments=None, high_risk=False, created_by="t", expires_at=None, uses_left=1
    )
    await store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("UPDATE requests SET owner = 'claude-code'")
    db.execute("UPDATE rules SET agent = 'claude-code' WHERE agent = 'x'")
    db.execute("DROP TABLE credentials")
    # and what the migrations after it added (previews; people sign in: sessions' person, sign counts,
    # proofs; receipts)
    db.executescript(
        "ALTER TABLE requests DROP COLUMN preview; ALTER TABLE requests DROP COLUMN preview_sha256;"
        "ALTER TABLE replies DROP COLUMN preview_sha256;"
        "ALTER TABLE web_sessions DROP COLUMN person; DROP TABLE sign_counts;"
        " ALTER TABLE replies DROP COLUMN proof;"
        "DROP TABLE receipts; ALTER TABLE requests DROP COLUMN receipt;"
    )
    before = next(i for i, m in enumerate(MIGRATIONS) if "CREATE TABLE credentials" in m)
    db.execute(f"PRAGMA user_version = {before}")
    db.close()

    store = SqliteStore(path)
    await store.open()
    try:
        migrated = await store.get("a" * 16)
        assert migrated is not None and migrated.owner == "stdio:claude-code"
        assert sorted(r.agent for r in await store.rules()) == ["*", "stdio:claude-code"]
        assert await store.credentials("agent") == []
    finally:
        await store.close()
