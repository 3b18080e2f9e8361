"""A flood of requests hides none: the API and the inbox page through every pending request (keyset
cursors), the inbox counts them all, and the CLI finds any of them by the start of its id."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest

from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.runtime import Runtime
from tests.conftest import api_client, cli, running
from tests.web.test_inbox_pages import browser_like

pytestmark = pytest.mark.anyio

FLOOD = 1205


async def flood(rt: Runtime, count: int = FLOOD) -> list[Request]:
    """``count`` pending questions straight into the store, oldest first; three share each instant,
    so the order within one creation time is the id's."""
    store = (await rt.broker()).store
    start = now() - count
    made = []
    for i in range(count):
        request = Request(
            id=secrets.token_hex(8),
            kind=Kind.QUESTION,
            text=f"Flood {i}?",
            channels=["web"],
            created_at=start + i // 3,
            expires_at=now() + 3600,
        )
        made.append((await store.create(request, None))[0])
    return made


def newest_first(requests: list[Request]) -> list[str]:
    return [r.id for r in sorted(requests, key=lambda r: (r.created_at, r.id), reverse=True)]


async def test_api_pages_through_every_pending_request(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        made = await flood(rt)
        broker = await rt.broker()
        settled = made[5]
        await broker.resolve(settled.id, Reply(channel="cli", responder="ana", text="done"))
        pending = newest_first([r for r in made if r.id != settled.id])
        for limit, pages in ((1000, 2), (100, 13)):
            seen: list[str] = []
            cursor = None
            for _ in range(pages):
                params = {"status": "pending", "limit": str(limit), **({"before": cursor} if cursor else {})}
                r = await api.get("/api/requests", params=params)
                assert r.status_code == 200, r.text
                body = r.json()
                seen += [item["id"] for item in body["requests"]]
                cursor = body["next"]
                if cursor is None:
                    break
            assert cursor is None and seen == pending  # each once, in order, the oldest included
        first = (await api.get("/api/requests")).json()
        assert len(first["requests"]) == 100 and first["next"] == first["requests"][-1]["id"]
        everything = (
            await api.get("/api/requests", params={"limit": "1000", "before": first["next"]})
        ).json()
        assert len(everything["requests"]) == 1000 and everything["next"] is not None
        r = await api.get("/api/requests", params={"before": "no-such-id"})
        assert r.status_code == 422 and "before" in r.json()["error"]
        last = await api.get("/api/requests", params={"status": "pending", "before": pending[-1]})
        assert last.json() == {"requests": [], "next": None}


async def test_inbox_counts_every_pending_request_and_pages_to_the_oldest(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        made = await flood(rt)
        seen: list[str] = []
        path = "/"
        for _ in range(10):
            page = await web.get(path)
            assert page.status_code == 200
            assert f"<title>({FLOOD}) Inbox · hitl-mcp</title>" in page.text
            assert f"{FLOOD} pending" in page.text
            cards = re.findall(r'<article class="card[^>]*? data-id="([0-9a-f]+)"', page.text)
            seen += cards
            more = re.search(
                r'<a href="(/\?before=[0-9a-f]+)" rel="next">(\d+) more pending, older</a>', page.text
            )
            if more is None:
                break
            assert int(more.group(2)) == FLOOD - len(seen)
            assert '<a href="/">Newest</a>' in (await web.get(more.group(1))).text
            path = more.group(1)
        assert seen == newest_first(made)
        assert (await web.get("/?before=nope")).status_code == 404


async def test_cli_answers_the_oldest_of_a_flood_by_the_start_of_its_id(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        made = await flood(rt)
        oldest = made[0]
        twins = [
            Request(
                id=f"abcd{n}{'0' * 11}", kind=Kind.QUESTION, text="Twin?", channels=["web"], created_at=now()
            )
            for n in range(2)
        ]
        for twin in twins:
            await (await rt.broker()).store.create(twin, None)
    prefix = oldest.id[:8]
    assert sum(r.id.startswith(prefix) for r in made) == 1
    code, out, err = await cli(state_dir, "answer", prefix, "yes")
    assert code == 0, err
    assert out.strip() == f"{oldest.id}: yes"
    code, _, err = await cli(state_dir, "answer", "abcd", "yes")
    assert code == 1 and "more than one request" in err
    code, out, _ = await cli(state_dir, "pending")
    assert code == 0
    listed = [line.split()[0] for line in out.splitlines() if " question " in line]
    assert len(listed) == FLOOD - 1 + 2 and oldest.id not in listed and made[1].id in listed


async def test_store_finds_ids_by_their_start(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        store = (await rt.broker()).store
        for rid in ("beef0001", "beef0002", "beef1000", "bee00000"):
            await store.create(
                Request(id=rid, kind=Kind.QUESTION, text="?", channels=["web"], created_at=now()), None
            )
        await (await rt.broker()).resolve("beef0001", Reply(channel="cli", responder="ana", text="x"))
        assert await store.ids_starting("beef0", limit=5) == ["beef0001", "beef0002"]
        assert await store.ids_starting("beef0", Status.PENDING) == ["beef0002"]
        assert await store.ids_starting("beef", limit=5) == ["beef0001", "beef0002", "beef1000"]
        assert await store.ids_starting("c") == []
        assert await store.count(Status.PENDING) == 3 and await store.count() == 4
