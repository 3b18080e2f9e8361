"""The inbox pages without a browser: rendering, the form POSTs, history filters, notifications,
the /events stream, the PWA files, and the view helpers."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.config import Config
from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.runtime import Runtime
from hitl_mcp.serving import HttpServer, bind
from hitl_mcp.web.sessions import digest
from hitl_mcp.web.views import HistoryFilter, agent_groups, ago, already_line, time_left
from tests.conftest import TOKEN, make_config, running

pytestmark = pytest.mark.anyio

FORM = {"content-type": "application/x-www-form-urlencoded"}


# --- a real server in this process ----------------------------------------------------------------


@dataclass
class Inbox:
    url: str
    runtime: Runtime


@contextlib.asynccontextmanager
async def serve_inbox(
    state_dir: Path, *, with_mcp: bool = True, config: Config | None = None
) -> AsyncIterator[Inbox]:
    """The whole HTTP app (MCP at /mcp too) under uvicorn on a free loopback port, in this event loop."""
    runtime = Runtime(config or make_config(), state_dir)
    sock = bind("127.0.0.1", 0)
    assert sock is not None
    port = sock.getsockname()[1]
    runtime.inbox_url = f"http://127.0.0.1:{port}"  # where links to the inbox point
    app = runtime.http_app(runtime.build_mcp() if with_mcp else None, "http", "127.0.0.1")
    http = HttpServer(app, sock)
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        async with anyio.create_task_group() as web:
            web.start_soon(http.run)  # the socket already listens: early connections wait in its backlog
            try:
                yield Inbox(f"http://127.0.0.1:{port}", runtime)
            finally:
                http.stop()  # uvicorn closes its connections; the group waits for it
        sock.close()
        tg.cancel_scope.cancel()


# --- an in-process client with the session cookie, as a browser after /login ----------------------


@contextlib.asynccontextmanager
async def browser_like(
    rt: Runtime, *, login: bool = True, person: str | None = None
) -> AsyncIterator[httpx2.AsyncClient]:
    """A client holding an inbox session: the operator's (signed in with the login link), or with
    ``person`` a person's, as a passkey sign-in leaves it (``tests/web/test_people_browser.py`` signs
    in with real passkeys); its CSRF token rides every request as ``X-CSRF-Token``."""
    app = rt.http_app(None, "stdio", "127.0.0.1")
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as web:
        if login or person:
            r = await web.get("/login", params={"token": TOKEN})
            assert r.status_code == 303
        if person:
            (name,) = web.cookies.keys()
            session_id = secrets.token_urlsafe(32)
            broker = await rt.broker()
            await broker.add_session(digest(session_id), now() + 3600, None, person)
            web.cookies.clear()
            web.cookies.set(name, session_id)
            web.headers["X-CSRF-Token"] = rt.auth.csrf_for(session_id)
        yield web


async def ask(rt: Runtime, **kw: Any) -> Request:
    broker = await rt.broker()
    request, _ = await broker.ask(AskSpec(**{"kind": Kind.QUESTION, "text": "Q?", **kw}))
    return request


async def status_of(rt: Runtime, request_id: str) -> tuple[Status, int]:
    broker = await rt.broker()
    request = await broker.get(request_id)
    assert request is not None
    return request.status, len(await broker.store.replies(request_id))


def csrf(rt: Runtime, web: httpx2.AsyncClient) -> str:
    """The CSRF token of the client's inbox session, as its pages carry it."""
    (session_id,) = web.cookies.values()
    return rt.auth.csrf_for(session_id)


def form(csrf: str | None, **fields: str) -> dict[str, str]:
    return {**fields, **({"csrf": csrf} if csrf is not None else {})}


# --- pages ------------------------------------------------------------------------------------------


async def test_inbox_shows_pending_grouped_and_escaped(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        await ask(rt, text="<script>alert(1)</script> Which?", client_name="claude-code", session_key="s1")
        await ask(
            rt,
            kind=Kind.APPROVAL,
            text="Deploy v2",
            payload={"tag": "v2"},
            risk="high",
            client_name="cursor",
            session_key="s2",
            timeout_seconds=600,
        )
        await ask(rt, text="Pick", choices=["red", "blue"], client_name="claude-code", session_key="s1")
        r = await web.get("/")
        assert r.status_code == 200
        page = r.text
        assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "<title>(3) Inbox · hitl-mcp</title>" in page
        assert page.count('class="group"') == 2
        assert page.index("Pick") < page.index("alert(1)")  # newest first within a group
        assert 'value="approve"' in page and 'value="deny"' in page and 'value="blue"' in page
        assert "High risk" in page and "min left" in page
        assert '"tag": "v2"' in page.replace("&#34;", '"')  # the payload, pretty-printed
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
        assert r.headers["cache-control"] == "no-store"
        broker = await rt.broker()

        async def changes() -> list[str]:  # what the outbox does on its own is not a change by a page
            return [a.event for a in await broker.store.audit() if not a.event.startswith("deliver")]

        before = await changes()
        for path in [
            "/",
            "/history",
            "/history?q=x&kind=question&status=answered&agent=a",
            "/manifest.webmanifest",
        ]:
            assert (await web.get(path)).status_code == 200
        assert await changes() == before  # GET changes nothing


async def test_request_page_shows_payload_hash_and_trail(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(rt, kind=Kind.APPROVAL, text="Drop table", payload={"sql": "DROP TABLE t"})
        page = (await web.get(f"/requests/{request.id}")).text
        assert request.payload_sha256 is not None and request.payload_sha256 in page
        assert "DROP TABLE t" in page and "Audit log" in page and "created" in page
        assert (await web.get("/requests/nope")).status_code == 404


async def test_signed_out_pages(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt, login=False) as web:
        request = await ask(rt)
        for path in ["/", f"/requests/{request.id}", "/history"]:
            r = await web.get(path)
            assert r.status_code == 401 and "Sign in" in r.text and request.text not in r.text
        assert (await web.get("/events")).status_code == 401
        bad = await web.get("/login", params={"token": "wrong"})
        assert bad.status_code == 401 and "not valid" in bad.text
        # the public shell: manifest, service worker, static files
        assert (await web.get("/manifest.webmanifest")).json()["start_url"] == "/"
        sw = await web.get("/sw.js")
        assert sw.status_code == 200 and sw.headers["content-type"].startswith("text/javascript")
        assert "/api" not in re.sub(r"//.*", "", sw.text)  # nothing from the API is cached
        assert (await web.get("/static/app.css")).status_code == 200


async def test_login_next_stays_on_this_site(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt, login=False) as web:
        for target, expected in [
            ("/requests/abc", "/requests/abc"),
            ("//evil.example", "/"),
            ("https://x", "/"),
        ]:
            r = await web.get("/login", params={"token": TOKEN, "next": target})
            assert r.headers["location"] == expected


# --- answering through the forms ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "fields", "outcome"),
    [
        ({}, {"text": "blue"}, {"answer": "blue"}),
        ({"choices": ["a", "b"]}, {"choice": "b", "text": ""}, {"answer": "b", "choice": "b"}),
        (
            {"kind": Kind.APPROVAL},
            {"decision": "approve", "comment": ""},
            {"approved": True, "comment": None},
        ),
        (
            {"kind": Kind.APPROVAL},
            {"decision": "deny", "comment": "no"},
            {"approved": False, "comment": "no"},
        ),
    ],
)
async def test_form_answers(
    state_dir: Path, kw: dict[str, Any], fields: dict[str, str], outcome: dict
) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(rt, **kw)
        r = await web.post(f"/requests/{request.id}/answer", data=form(csrf(rt, web), next="inbox", **fields))
        assert r.status_code == 303 and r.headers["location"] == f"/?answered={request.id}"
        settled = await (await rt.broker()).get(request.id)
        assert settled is not None and settled.status == Status.ANSWERED
        assert settled.channel == "web" and settled.responder == "operator"
        for key, value in outcome.items():
            assert getattr(settled, key) == value
        banner = (await web.get(r.headers["location"])).text
        assert "Answered by operator" in banner or "proved by operator" in banner or "Denied" in banner


async def test_a_high_risk_approval_from_the_form_takes_a_confirmation_step(state_dir: Path) -> None:
    """Without JavaScript too: Approve on a `risk: high` approval shows a confirmation page (Cancel
    first, focused), and only its own Approve, which carries ``confirm=yes``, approves."""
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(
            rt, kind=Kind.APPROVAL, text="Drop the users table", risk="high", payload={"a": 1}
        )
        path = f"/requests/{request.id}/answer"
        fields = {"decision": "approve", "comment": "after the dump", "next": "request"}
        r = await web.post(path, data=form(csrf(rt, web), **fields))
        assert r.status_code == 200 and "Approve this high-risk request?" in r.text
        assert re.search(r'<a class="btn" href="/requests/[0-9a-f]+" autofocus>Cancel</a>', r.text)
        assert r.text.index(">Cancel<") < r.text.index('value="approve"')
        assert 'name="confirm" value="yes"' in r.text and 'value="after the dump"' in r.text
        assert "&#34;a&#34;: 1" in r.text  # the payload is shown again
        assert await status_of(rt, request.id) == (Status.PENDING, 0)
        json_mode = {"X-CSRF-Token": csrf(rt, web), "Accept": "application/json"}
        r = await web.post(path, data={"decision": "approve"}, headers=json_mode)
        assert r.status_code == 428 and r.json()["confirm"] is True
        assert await status_of(rt, request.id) == (Status.PENDING, 0)
        r = await web.post(path, data=form(csrf(rt, web), confirm="yes", **fields))
        assert r.status_code == 303
        settled = await (await rt.broker()).get(request.id)
        assert settled is not None and settled.approved is True and settled.comment == "after the dump"
        denied = await ask(rt, kind=Kind.APPROVAL, text="Drop it again", risk="high")
        r = await web.post(f"/requests/{denied.id}/answer", data=form(csrf(rt, web), decision="deny"))
        assert r.status_code == 303  # denying needs no second step
        assert await status_of(rt, denied.id) == (Status.ANSWERED, 1)


async def test_form_json_mode_and_request_page_redirect(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(rt)
        r = await web.post(
            f"/requests/{request.id}/answer",
            data={"text": "hello"},
            headers={"X-CSRF-Token": csrf(rt, web), "Accept": "application/json"},
        )
        assert r.status_code == 200 and r.json()["ok"] is True and "hello" in r.json()["message"]
        other = await ask(rt, text="Other?")
        r = await web.post(f"/requests/{other.id}/answer", data=form(csrf(rt, web), text="x", next="request"))
        assert r.headers["location"] == f"/requests/{other.id}"


async def test_post_without_csrf_or_cookie_changes_nothing(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web, browser_like(rt, login=False) as anon:
        request = await ask(rt)
        path = f"/requests/{request.id}/answer"
        assert (await web.post(path, data={"text": "x"})).status_code == 403
        assert (await web.post(path, data=form("0" * 64, text="x"))).status_code == 403
        assert (await anon.post(path, data=form(csrf(rt, web), text="x"))).status_code == 401
        assert (await web.get(path)).status_code == 405
        assert await status_of(rt, request.id) == (Status.PENDING, 0)
        note = await (await rt.broker()).notify(AskSpec(kind=Kind.NOTIFICATION, text="hi"))
        assert (await web.post(f"/notifications/{note.request_id}/dismiss", data={})).status_code == 403
        assert (await anon.post("/notifications/dismiss", data=form(csrf(rt, web)))).status_code == 401
        events = [a.event for a in await (await rt.broker()).store.audit(note.request_id)]
        assert "dismissed" not in events


async def test_bad_bodies_are_refused(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(rt)
        path = f"/requests/{request.id}/answer"
        header = {"X-CSRF-Token": csrf(rt, web)}
        r = await web.post(path, json={"text": "x"}, headers=header)
        assert r.status_code == 415
        r = await web.post(path, content=b"text=" + b"x" * (65 * 1024), headers={**header, **FORM})
        assert r.status_code == 413
        r = await web.post(path, data=form(csrf(rt, web), text="x" * 8001))
        assert r.status_code == 422
        r = await web.post(path, data=form(csrf(rt, web), decision="maybe"))
        assert r.status_code == 422
        token = csrf(rt, web).encode()
        for bad in (b"text=caf%E9", b"text=%FF%FE", b"text=caf\xe9", b"text=ok&comment=%C3"):  # not UTF-8
            r = await web.post(
                path, content=bad + b"&csrf=" + token, headers={**FORM, "Accept": "application/json"}
            )
            assert r.status_code == 400 and "UTF-8" in r.json()["error"], bad
        assert await status_of(rt, request.id) == (Status.PENDING, 0)
        assert (
            await web.post("/requests/nope/answer", data=form(csrf(rt, web), text="x"))
        ).status_code == 404


async def test_invalid_answer_re_renders_with_the_error_and_the_draft(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(rt, choices=["a", "b"], allow_free_text=False)
        r = await web.post(f"/requests/{request.id}/answer", data=form(csrf(rt, web), choice="c"))
        assert r.status_code == 422 and "was not offered" in r.text
        approval = await ask(rt, kind=Kind.APPROVAL, text="Go?")
        r = await web.post(
            f"/requests/{approval.id}/answer", data=form(csrf(rt, web), text="sure", comment="my note")
        )
        assert r.status_code == 422 and "decision" in r.text and "my note" in r.text
        assert await status_of(rt, approval.id) == (Status.PENDING, 0)


async def test_late_answer_says_who_answered_how_and_when(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        request = await ask(rt)
        broker = await rt.broker()
        await broker.resolve(request.id, Reply(channel="cli", responder="ana (terminal)", text="first"))
        r = await web.post(f"/requests/{request.id}/answer", data=form(csrf(rt, web), text="second"))
        assert r.status_code == 409
        assert (
            "Already answered by ana (terminal) via cli at 20" in r.text and "Nothing was changed" in r.text
        )
        r = await web.post(
            f"/requests/{request.id}/answer",
            data={"text": "third"},
            headers={"X-CSRF-Token": csrf(rt, web), "Accept": "application/json"},
        )
        assert (
            r.status_code == 409
            and r.json()["channel"] == "cli"
            and r.json()["responder"] == "ana (terminal)"
        )
        settled = await broker.get(request.id)
        assert settled is not None and settled.answer == "first"


# --- history and notifications ----------------------------------------------------------------------


async def test_history_search_and_filters(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        broker = await rt.broker()
        q = await ask(rt, text="Which database?", client_name="claude-code")
        await broker.resolve(q.id, Reply(channel="web", responder="me", text="postgres"))
        a = await ask(rt, kind=Kind.APPROVAL, text="Reboot the box", client_name="cursor")
        await broker.resolve(
            a.id, Reply(channel="cli", responder="ana", decision="deny", comment="not today")
        )
        c = await ask(rt, text="Lunch?", client_name="cursor")
        await broker.cancel(c.id, "never mind", "cursor")
        await ask(rt, text="Still pending?")

        async def shown(**params: str) -> set[str]:
            page = (await web.get("/history", params=params)).text
            return set(re.findall(r'data-id="([0-9a-f]+)"', page))

        assert await shown() == {q.id, a.id, c.id}
        assert await shown(q="POSTGRES") == {q.id}
        assert await shown(q="today") == {a.id}
        assert await shown(kind="approval") == {a.id}
        assert await shown(status="cancelled") == {c.id}
        assert await shown(agent="cursor") == {a.id, c.id}
        assert await shown(agent="cursor", kind="question") == {c.id}
        assert await shown(q="nothing-like-this") == set()
        page = (await web.get("/history")).text
        assert "Denied by ana via cli" in page and "not today" in page


async def test_notifications_feed_and_dismiss(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        broker = await rt.broker()
        first = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Build green", level="success"))
        second = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Disk full", title="Ops"))
        page = (await web.get("/")).text
        assert "Build green" in page and "Disk full" in page
        r = await web.post(f"/notifications/{first.request_id}/dismiss", data=form(csrf(rt, web)))
        assert r.status_code == 303
        await web.post(f"/notifications/{first.request_id}/dismiss", data=form(csrf(rt, web)))
        events = [a.event for a in await broker.store.audit(first.request_id)]
        assert events.count("dismissed") == 1
        page = (await web.get("/")).text
        assert "Build green" not in page and "Disk full" in page
        r = await web.post(
            "/notifications/dismiss", data=form(csrf(rt, web)), headers={"Accept": "application/json"}
        )
        assert r.json() == {"ok": True, "dismissed": [second.request_id]}
        assert "Disk full" not in (await web.get("/")).text
        q = await ask(rt)
        r = await web.post(f"/notifications/{q.id}/dismiss", data=form(csrf(rt, web)))
        assert r.status_code == 404


# --- /events -----------------------------------------------------------------------------------------


class EventReader:
    """Server-Sent Events off one streaming response, one at a time."""

    def __init__(self, response: httpx2.Response) -> None:
        self.lines = response.aiter_lines()

    async def next(self) -> tuple[str, dict]:
        name = ""
        async for line in self.lines:
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                return name, json.loads(line[6:])
        raise AssertionError("the stream ended")


async def test_events_stream_changes_from_any_process_and_unsubscribes(state_dir: Path) -> None:
    async with serve_inbox(state_dir, with_mcp=False) as inbox:
        broker = await inbox.runtime.broker()
        unsubscribed = anyio.Event()
        listen = broker.listen

        def spy(listener: Callable[[str, str], None]) -> Callable[[], None]:
            unsubscribe = listen(listener)

            def wrapped() -> None:
                unsubscribe()
                unsubscribed.set()

            return wrapped

        broker.listen = spy  # type: ignore[method-assign]
        async with httpx2.AsyncClient(base_url=inbox.url, timeout=10) as web:
            assert (await web.get("/login", params={"token": TOKEN})).status_code == 303
            async with web.stream("GET", "/events") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                events = EventReader(response)
                with anyio.fail_after(10):
                    assert await events.next() == ("hello", {})
                    assert len(broker._listeners) == 1
                    request = await ask(inbox.runtime)
                    assert await events.next() == ("change", {"id": request.id, "event": "created"})
                    # an answer written by another process (the CLI) sharing the database
                    async with running(state_dir) as other:
                        await (await other.broker()).resolve(
                            request.id, Reply(channel="cli", responder="ana", text="ok")
                        )
                    while await events.next() != ("change", {"id": request.id, "event": "answered"}):
                        pass
            with anyio.fail_after(5):  # the browser went away: the subscription ends
                await unsubscribed.wait()
            assert not broker._listeners


# --- view helpers ---------------------------------------------------------------------------------------


def test_times() -> None:
    assert ago(100.0, 110.0) == "just now"
    assert ago(0.0, 600.0) == "10 min ago"
    assert ago(0.0, 7200.0) == "2 h ago"
    assert time_left(None, 0.0) == "no expiry"
    assert time_left(30.0, 0.0) == "30 s left"
    assert time_left(3600.0 + 600, 0.0) == "1 h 10 min left"
    assert time_left(0.0, 10.0) == "expiring"


def test_groups_and_filters() -> None:
    def req(rid: str, at: float, agent: str | None, session: str | None, **kw: Any) -> Request:
        return Request(id=rid, kind=Kind.QUESTION, text=f"text {rid}", created_at=at, client_name=agent,
                       session_key=session, **kw)  # fmt: skip

    groups = agent_groups([req("a", 1, "x", "s1"), req("b", 3, "y", "s2"), req("c", 2, "x", "s1")])
    assert [(g.agent, [r.id for r in g.requests]) for g in groups] == [("y", ["b"]), ("x", ["c", "a"])]
    assert agent_groups([req("d", 1, None, None)])[0].agent == "unknown agent"
    answered = req("e", 1, "x", "s", status=Status.ANSWERED, answer="Blue sky", responder="me", channel="web")
    assert HistoryFilter.from_query({"q": "sky blue"}).matches(answered)
    assert not HistoryFilter.from_query({"q": "green"}).matches(answered)
    assert HistoryFilter.from_query({"kind": "bogus", "status": "pending"}) == HistoryFilter()
    assert not HistoryFilter().matches(req("f", 1, "x", "s"))  # pending is not history
    assert already_line(answered).startswith("Already answered by me via web at ")
