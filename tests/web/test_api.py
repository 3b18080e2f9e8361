"""The JSON API: auth, every status code, and that nothing changes without valid credentials."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind, Status
from tests.conftest import TOKEN, api_client, running

pytestmark = pytest.mark.anyio


async def ask(rt, **kw) -> str:  # type: ignore[no-untyped-def]
    broker = await rt.broker()
    request, _ = await broker.ask(AskSpec(**{"kind": Kind.QUESTION, "text": "Q?", **kw}))
    return request.id


async def test_healthz_needs_no_auth(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        r = await api.get("/healthz", headers={"Authorization": ""})
        assert r.status_code == 200 and r.json()["status"] == "ok"


async def test_healthz_answers_503_when_the_store_is_down(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        assert (await api.get("/healthz")).json()["store"] == "ok"
        store = (await rt.broker()).store
        await store.close()  # what a lost disk or a broken database file looks like from here
        try:
            r = await api.get("/healthz")
            assert (r.status_code, r.json()["status"], r.json()["store"]) == (503, "unavailable", "down")
        finally:
            await store.open()  # the runtime closes it again on the way out


@pytest.mark.parametrize("header", [None, "Bearer wrong", "Basic " + TOKEN, "Bearer"])
async def test_without_valid_token_nothing_changes(state_dir: Path, header: str | None) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        rid = await ask(rt)
        headers = {"Authorization": header} if header else {}
        api.headers.pop("Authorization")
        for method, path in [("GET", "/api/requests"), ("GET", f"/api/requests/{rid}"), ("GET", "/")]:
            r = await api.request(method, path, headers=headers)
            assert r.status_code == 401, path
        r = await api.post(f"/api/requests/{rid}/reply", json={"text": "x"}, headers=headers)
        assert r.status_code == 401
        request = await (await rt.broker()).get(rid)
        assert request is not None and request.status == Status.PENDING
        assert await (await rt.broker()).store.replies(rid) == []


async def test_login_sets_cookie_and_cookie_alone_cannot_write(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        app = rt.http_app(None, "stdio", "127.0.0.1")
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as web:
            bad = await web.get("/login", params={"token": "nope"})
            assert bad.status_code == 401
            r = await web.get("/login", params={"token": TOKEN})
            assert r.status_code == 303 and r.headers["location"] == "/"
            cookie = r.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
            assert TOKEN not in cookie
            assert (await web.get("/")).status_code == 200
            rid = await ask(rt)
            assert (await web.post(f"/api/requests/{rid}/reply", json={"text": "x"})).status_code == 401
            ok = await web.post(
                f"/api/requests/{rid}/reply",
                json={"text": "x"},
                headers={"X-CSRF-Token": rt.auth.csrf_for(web.cookies["hitl_session"])},
            )
            assert ok.status_code == 200


async def test_list_and_show(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        rid = await ask(rt, choices=["a", "b"])
        listed = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
        assert [r["id"] for r in listed] == [rid]
        assert (await api.get("/api/requests", params={"status": "answered"})).json()["requests"] == []
        await api.post(f"/api/requests/{rid}/reply", json={"choice": "b"})
        shown = (await api.get(f"/api/requests/{rid}")).json()
        assert shown["outcome"]["choice"] == "b"
        assert [r["won"] for r in shown["replies"]] == [True]
        assert [a["event"] for a in shown["audit"]][:1] == ["created"]
        assert "answered" in [a["event"] for a in shown["audit"]]
        assert shown["deliveries"][0]["channel"] == "web"


@pytest.mark.parametrize(
    ("params", "status"),
    [({"status": "bogus"}, 422), ({"limit": "x"}, 422), ({"limit": "0"}, 422), ({"limit": "5000"}, 422)],
)
async def test_list_bad_query(state_dir: Path, params: dict[str, str], status: int) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        assert (await api.get("/api/requests", params=params)).status_code == status


async def test_unknown_id_is_404(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        assert (await api.get("/api/requests/nope")).status_code == 404
        assert (await api.post("/api/requests/nope/reply", json={"text": "x"})).status_code == 404


async def test_second_answer_is_409_and_says_who(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        rid = await ask(rt)
        assert (await api.post(f"/api/requests/{rid}/reply", json={"text": "first"})).status_code == 200
        late = await api.post(f"/api/requests/{rid}/reply", json={"text": "second"})
        assert late.status_code == 409
        body = late.json()
        assert "already answered by" in body["error"] and body["channel"] == "web" and body["at"]
        request = await (await rt.broker()).get(rid)
        assert request is not None and request.answer == "first"
        replies = await (await rt.broker()).store.replies(rid)
        assert [(r.text, r.won) for r in replies] == [("first", True), ("second", False)]


@pytest.mark.parametrize(
    ("kw", "body", "status"),
    [
        ({"choices": ["a", "b"]}, {"choice": "c"}, 422),
        ({"choices": ["a", "b"]}, {"text": "something else"}, 422),
        ({"choices": ["a", "b"]}, {"text": "A"}, 200),
        ({}, {"decision": "approve"}, 422),
        ({}, {"text": "   "}, 422),
        ({}, {}, 422),
        ({}, {"text": "x", "extra": 1}, 422),
        ({}, {"text": 5}, 422),
        ({}, {"text": "x" * 8001}, 422),
        ({}, ["text"], 422),
        ({"kind": Kind.APPROVAL}, {"decision": "maybe"}, 422),
        ({"kind": Kind.APPROVAL}, {"choice": "a"}, 422),
        ({"kind": Kind.APPROVAL}, {"decision": "approve", "comment": "ok"}, 200),
    ],
)
async def test_reply_validation(state_dir: Path, kw: dict, body: object, status: int) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        rid = await ask(rt, **kw)
        r = await api.post(f"/api/requests/{rid}/reply", json=body)
        assert r.status_code == status, r.text
        request = await (await rt.broker()).get(rid)
        assert request is not None
        assert request.status == (Status.ANSWERED if status == 200 else Status.PENDING)


async def test_malformed_and_oversized_bodies(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        rid = await ask(rt)
        r = await api.post(f"/api/requests/{rid}/reply", content=b"{not json")
        assert r.status_code == 400
        r = await api.post(f"/api/requests/{rid}/reply", content=b"x" * (65 * 1024))
        assert r.status_code == 413
        request = await (await rt.broker()).get(rid)
        assert request is not None and request.status == Status.PENDING


@pytest.mark.parametrize("opener", ["[", '{"a":'])
async def test_deeply_nested_json_is_a_400_not_a_crash(state_dir: Path, opener: str) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        rid = await ask(rt)
        depth = 30_000 // len(opener)  # both ends: under the 64 KiB the reply route reads
        closer = "]" if opener == "[" else "}"
        body = (opener * depth + "1" + closer * depth).encode()
        r = await api.post(f"/api/requests/{rid}/reply", content=body)
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"]
        assert await (await rt.broker()).store.replies(rid) == []


async def test_bodies_over_the_configured_limit_are_refused_before_parsing(state_dir: Path) -> None:
    from tests.conftest import make_config

    config = make_config("server:\n  http: {max_body_bytes: 4096}\n")
    async with running(state_dir, config) as rt, api_client(rt) as api:
        rid = await ask(rt)
        body = {"text": "y" * 5000}  # a fine answer, but over this server's limit
        declared = await api.post(f"/api/requests/{rid}/reply", json=body)
        assert declared.status_code == 413

        async def chunks():  # type: ignore[no-untyped-def]
            for _ in range(10):
                yield b" " * 1000  # no Content-Length: counted as it streams

        streamed = await api.post(f"/api/requests/{rid}/reply", content=chunks())
        assert streamed.status_code == 413
        request = await (await rt.broker()).get(rid)
        assert request is not None and request.status == Status.PENDING
        small = await api.post(f"/api/requests/{rid}/reply", json={"text": "y" * 3000})
        assert small.status_code == 200
