"""The web inbox in real headless Chromium (Debian's ``chromium``, driven by Playwright for Python).

The server is the whole HTTP app under uvicorn on a loopback port, in this event loop; requests are
made through the MCP client at ``/mcp`` and answered on the page, and the answer must come back to
the waiting MCP call.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp import types as mcp_types

from hitl_mcp.broker import AskSpec
from hitl_mcp.config import parse_config
from hitl_mcp.core.models import Kind, now
from hitl_mcp.web.links import RequestLinks
from tests.conftest import ROOT, TOKEN, bearer, sc
from tests.web.test_inbox_pages import Inbox, serve_inbox

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-quic",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"),
        reason=f"no Debian chromium at {CHROMIUM} (apt-get install chromium); these tests always run in CI",
    ),
]

playwright_api = pytest.importorskip("playwright.async_api")
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect  # noqa: E402

expect.set_options(timeout=10_000)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """One Chromium for the module; each test has its own context (cookies, storage, workers)."""
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@contextlib.asynccontextmanager
async def inbox_and_page(
    state_dir: Path, browser: Browser, **context: Any
) -> AsyncIterator[tuple[Inbox, BrowserContext, Page]]:
    """A server, and a page signed in through the login link and following /events."""
    async with serve_inbox(state_dir) as inbox:
        ctx = await browser.new_context(**context)
        try:
            page = await ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{inbox.url}/login?token={TOKEN}")
            await expect(page.locator("#live")).to_have_attribute("data-state", "on")
            yield inbox, ctx, page
            assert errors == [], errors
        finally:
            await ctx.close()


class Call:
    """A blocking MCP tool call running in the background while the test drives the page."""

    def __init__(self, client: Client, tool: str, args: dict[str, Any]) -> None:
        self.client, self.tool, self.args = client, tool, {"wait_seconds": 40, **args}
        self.result: dict[str, Any] = {}
        self.done = anyio.Event()

    async def run(self) -> None:
        self.result = sc(await self.client.call_tool(self.tool, self.args))
        self.done.set()

    async def outcome(self) -> dict[str, Any]:
        with anyio.fail_after(15):
            await self.done.wait()
        return self.result


async def pending_ids(inbox: Inbox) -> list[str]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        r = await http.get(f"{inbox.url}/api/requests", params={"status": "pending"})
        return [item["id"] for item in r.json()["requests"]]


async def api_get(inbox: Inbox, path: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        return (await http.get(f"{inbox.url}{path}")).json()


async def test_login_link_sets_a_strict_http_only_cookie_and_drops_the_token(
    state_dir: Path, browser: Browser
) -> None:
    async with inbox_and_page(state_dir, browser) as (inbox, ctx, page):
        assert page.url == f"{inbox.url}/"
        assert TOKEN not in page.url
        cookies = {c["name"]: c for c in await ctx.cookies()}
        port = inbox.url.rsplit(":", 1)[1]
        session = cookies[f"hitl_session_{port}"]  # cookies ignore ports: the name does not
        assert session["httpOnly"] and session["sameSite"] == "Strict" and TOKEN not in session["value"]
        assert session["path"] == "/" and 0 < session["expires"] - time.time() <= 12 * 3600
        assert await page.evaluate("document.cookie") == ""  # script cannot read it
        await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
        await expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
        stranger = await browser.new_context()
        try:
            other = await stranger.new_page()
            response = await other.goto(f"{inbox.url}/")
            assert response is not None and response.status == 401
            await expect(other.get_by_role("heading", name="Sign in to the inbox")).to_be_visible()
            response = await other.goto(f"{inbox.url}/login?token=wrong")
            assert response is not None and response.status == 401
        finally:
            await stranger.close()


ANSWERS = {
    "text": ("ask_user", {"question": "Which colour for the button?"}),
    "choice": ("ask_user", {"question": "Which region?", "choices": ["eu-west-1", "us-east-1"]}),
    "approve": ("request_approval", {"action": "Deploy v2", "payload": {"tag": "v2"}, "risk": "high"}),
    "deny": ("request_approval", {"action": "Drop the users table", "payload": {"sql": "DROP TABLE users"}}),
}


@pytest.mark.parametrize("how", list(ANSWERS))
async def test_mcp_request_appears_live_and_the_page_answer_returns_to_the_agent(
    state_dir: Path, browser: Browser, how: str
) -> None:
    tool, args = ANSWERS[how]
    text = args.get("question") or args["action"]
    async with (
        inbox_and_page(state_dir, browser) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
        anyio.create_task_group() as tg,
    ):
        await page.evaluate("window.__sameDocument = true")
        call = Call(client, tool, args)
        tg.start_soon(call.run)
        card = page.locator("article.card", has_text=text)
        await expect(card).to_be_visible()
        await expect(page).to_have_title("(1) Inbox · hitl-mcp")
        assert await page.evaluate("window.__sameDocument") is True  # it came in live, not by a reload
        if how == "text":
            await card.get_by_label("Your answer").fill("Indigo, like the logo")
            await card.get_by_role("button", name="Send").click()
        elif how == "choice":
            await card.get_by_role("button", name="us-east-1").click()
        elif how == "approve":  # risk: high, so the click asks to confirm, with the focus on Cancel
            await expect(card.locator("pre")).to_contain_text('"tag": "v2"')
            await card.get_by_role("button", name="Approve").click()
            confirm = page.get_by_role("dialog", name="Approve this high-risk request?")
            await expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()
            await confirm.get_by_role("button", name="Approve").click()
        else:
            await card.get_by_label("Comment").fill("Not on a Friday")
            await card.get_by_role("button", name="Deny").click()
        result = await call.outcome()
        assert result["status"] == "answered"
        assert result["channel"] == "web" and result["responder"] == "operator"
        expected = {
            "text": {"answer": "Indigo, like the logo"},
            "choice": {"answer": "us-east-1", "choice": "us-east-1"},
            "approve": {"approved": True},
            "deny": {"approved": False, "comment": "Not on a Friday"},
        }[how]
        assert {k: result[k] for k in expected} == expected
        await expect(card).to_have_count(0)
        await expect(page).to_have_title("Inbox · hitl-mcp")
        await expect(page.locator("#toasts")).to_contain_text(text)
        assert await page.evaluate("window.__sameDocument") is True


async def test_requests_answered_elsewhere_leave_the_page_live(state_dir: Path, browser: Browser) -> None:
    async with (
        inbox_and_page(state_dir, browser) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
    ):
        await page.evaluate("window.__sameDocument = true")
        first = sc(await client.call_tool("ask_user", {"question": "Tabs or spaces?", "wait_seconds": 0}))
        second = sc(
            await client.call_tool("request_approval", {"action": "Restart the worker", "wait_seconds": 0})
        )
        third = sc(
            await client.call_tool("ask_user", {"question": "Name of the release?", "wait_seconds": 0})
        )
        await expect(page.locator("article.card")).to_have_count(3)
        await expect(page).to_have_title("(3) Inbox · hitl-mcp")
        # a reply half typed in the third card must survive the page following the others
        draft = page.locator(f"#r-{third['request_id']} textarea")
        await draft.fill("Aurora")
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            r = await http.post(
                f"{inbox.url}/api/requests/{first['request_id']}/reply", json={"text": "spaces"}
            )
            assert r.status_code == 200
        await expect(page.locator(f"#r-{first['request_id']}")).to_have_count(0)
        await expect(page).to_have_title("(2) Inbox · hitl-mcp")
        await expect(page.locator("#toasts")).to_contain_text(
            "“Tabs or spaces?” was answered by operator via web"
        )
        # another process (the terminal) sharing the database
        await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "hitl_mcp",
                    "approve",
                    second["request_id"],
                    "--state-dir",
                    str(state_dir),
                ],
                cwd=ROOT,
                env={k: v for k, v in os.environ.items() if not k.startswith("HITL_")},
                check=True,
                capture_output=True,
            )
        )
        await expect(page.locator(f"#r-{second['request_id']}")).to_have_count(0)
        await expect(page).to_have_title("(1) Inbox · hitl-mcp")
        await expect(page.locator("#toasts")).to_contain_text("“Restart the worker” was approved by")
        await expect(draft).to_have_value("Aurora")
        assert await page.evaluate("window.__sameDocument") is True
        done = sc(await client.call_tool("wait_for_response", {"request_id": second["request_id"]}))
        assert done["approved"] is True and done["channel"] == "cli"


async def test_a_url_elicitation_link_opens_the_request_and_its_answer_returns_to_the_agent(
    state_dir: Path, browser: Browser
) -> None:
    """A host that opens links (URL-mode elicitation) gets a one-time link. In a browser that is not
    signed in, the link asks for the web token first (it is not a credential), then opens the
    request; the approval given there reaches the agent."""
    config = parse_config(
        f"channels:\n  web: {{type: web, token: {TOKEN}}}\n  elicitation: {{type: elicitation, mode: url}}\n",
        source="test.yaml",
    )
    shown: list[mcp_types.ElicitRequestURLParams] = []
    offered = anyio.Event()

    async def host(context: Any, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        assert isinstance(params, mcp_types.ElicitRequestURLParams)
        shown.append(params)
        offered.set()
        return mcp_types.ElicitResult(action="accept")  # the person agreed to open it

    async with (
        serve_inbox(state_dir, config=config) as inbox,
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy", elicitation_callback=host) as client,
        anyio.create_task_group() as tg,
    ):
        call = Call(client, "request_approval", {"action": "Rotate the signing keys"})
        tg.start_soon(call.run)
        with anyio.fail_after(15):
            await offered.wait()
        ctx = await browser.new_context()  # not signed in
        try:
            page = await ctx.new_page()
            first = await page.goto(shown[0].url)
            assert first is not None and first.status == 401
            await page.get_by_label("Web token").fill(TOKEN)
            await page.get_by_role("button", name="Sign in and open it").click()
            (request_id,) = await pending_ids(inbox)
            await expect(page).to_have_url(f"{inbox.url}/requests/{request_id}")
            card = page.locator("article.card", has_text="Rotate the signing keys")
            await card.get_by_role("button", name="Approve").click()
            result = await call.outcome()
            assert result["status"] == "answered" and result["approved"] is True
            assert result["channel"] == "web" and result["responder"] == "operator"
            again = await page.goto(shown[0].url)
            assert again is not None and again.status == 409  # the link works once
        finally:
            await ctx.close()


async def test_post_without_csrf_token_or_without_cookie_is_refused_and_changes_nothing(
    state_dir: Path, browser: Browser
) -> None:
    async with (
        inbox_and_page(state_dir, browser) as (inbox, ctx, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
    ):
        rid = sc(await client.call_tool("ask_user", {"question": "Proceed?", "wait_seconds": 0}))[
            "request_id"
        ]
        await expect(page.locator(f"#r-{rid}")).to_be_visible()
        url = f"{inbox.url}/requests/{rid}/answer"
        csrf = await page.locator('meta[name="csrf-token"]').get_attribute("content")
        assert csrf
        # with the cookie (sent by the browser) but without the CSRF token: what a cross-site form can do
        status = await page.evaluate(
            "async (url) => (await fetch(url, {method: 'POST', body: new URLSearchParams({text: 'yes'})}))"
            ".status",
            url,
        )
        assert status == 403
        refused = await ctx.request.post(url, form={"text": "yes", "csrf": "not-the-token"})
        assert refused.status == 403
        # with the CSRF token but without the cookie
        stranger = await browser.new_context()
        try:
            refused = await stranger.request.post(url, form={"text": "yes", "csrf": csrf})
            assert refused.status == 401
        finally:
            await stranger.close()
        shown = await api_get(inbox, f"/api/requests/{rid}")
        assert shown["status"] == "pending" and shown["replies"] == []
        await expect(page.locator(f"#r-{rid}")).to_be_visible()


async def test_phone_width_has_no_horizontal_scroll(state_dir: Path, browser: Browser) -> None:
    phone = {"viewport": {"width": 375, "height": 740}, "is_mobile": True, "has_touch": True}
    async with (
        inbox_and_page(state_dir, browser, **phone) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
    ):
        long_word = "x" * 300
        await client.call_tool(
            "ask_user",
            {
                "question": f"A long one {long_word}?",
                "context": long_word,
                "choices": ["a" * 120, "b"],
                "wait_seconds": 0,
            },
        )
        await client.call_tool(
            "request_approval",
            {
                "action": "Run a very long command",
                "details": long_word,
                "payload": {"argv": ["--flag"] * 40, "blob": long_word},
                "risk": "high",
                "wait_seconds": 0,
            },
        )
        await client.call_tool("notify_user", {"message": f"Heads up {long_word}", "title": "Note"})
        await expect(page.locator("article.card")).to_have_count(2)
        await expect(page.locator(".note")).to_have_count(1)
        await expect(page.locator("article.card").first).to_contain_text("Run a very long command")
        rid, other = await pending_ids(inbox)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            await http.post(
                f"{inbox.url}/api/requests/{other}/reply", json={"decision": "deny", "comment": long_word}
            )
        for path in ["/", f"/requests/{rid}", f"/requests/{other}", "/history"]:
            await page.goto(f"{inbox.url}{path}")
            width = await page.evaluate("document.scrollingElement.scrollWidth")
            assert width <= 375, (path, width)
        await page.goto(f"{inbox.url}/")
        for button in await page.locator("article.card button").all():
            box = await button.bounding_box()
            assert box is not None and box["height"] >= 44, await button.inner_text()


async def test_keyboard_approve_and_deny(state_dir: Path, browser: Browser) -> None:
    async with (
        inbox_and_page(state_dir, browser) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
        anyio.create_task_group() as tg,
    ):
        approve = Call(client, "request_approval", {"action": "Merge the PR", "payload": {"pr": 12}})
        tg.start_soon(approve.run)
        card = page.locator("article.card", has_text="Merge the PR")
        await expect(card).to_be_visible()
        await page.keyboard.press("j")
        await expect(card).to_have_class(_has("selected"))
        await page.keyboard.press("a")
        result = await approve.outcome()
        assert result["approved"] is True and result["channel"] == "web"
        await expect(card).to_have_count(0)

        deny = Call(client, "request_approval", {"action": "Force-push main"})
        tg.start_soon(deny.run)
        card = page.locator("article.card", has_text="Force-push main")
        await expect(card).to_be_visible()
        await keys_awake(page)
        await page.keyboard.press("j")
        await page.keyboard.press("r")
        await expect(card.get_by_label("Comment")).to_be_focused()
        await page.keyboard.type("Never on main")
        await page.keyboard.press("Escape")
        await page.keyboard.press("d")
        result = await deny.outcome()
        assert result["approved"] is False and result["comment"] == "Never on main"

        await page.keyboard.press("?")
        await expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
        await page.keyboard.press("Escape")
        await page.keyboard.press("/")
        await expect(page.locator("#top-search")).to_be_focused()


async def test_late_answer_without_javascript_shows_who_answered(state_dir: Path, browser: Browser) -> None:
    async with serve_inbox(state_dir) as inbox:
        ctx = await browser.new_context(java_script_enabled=False)
        try:
            page = await ctx.new_page()
            await page.goto(f"{inbox.url}/login?token={TOKEN}")
            async with Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client:
                rid = sc(await client.call_tool("ask_user", {"question": "Ship?", "wait_seconds": 0}))[
                    "request_id"
                ]
                other = sc(await client.call_tool("ask_user", {"question": "Name?", "wait_seconds": 0}))
            await page.goto(f"{inbox.url}/requests/{rid}")
            await page.get_by_label("Your answer").fill("yes")
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                r = await http.post(f"{inbox.url}/api/requests/{rid}/reply", json={"text": "no"})
                assert r.status_code == 200
            await page.get_by_role("button", name="Send").click()
            await expect(page.get_by_role("heading", name="Your answer was not used")).to_be_visible()
            await expect(page.locator(".already-line")).to_contain_text(
                "Already answered by operator via web at"
            )
            shown = await api_get(inbox, f"/api/requests/{rid}")
            assert shown["outcome"]["answer"] == "no"
            # and without JavaScript, a plain form POST answers and lands on the request's page
            await page.goto(f"{inbox.url}/requests/{other['request_id']}")
            await page.get_by_label("Your answer").fill("Aurora")
            await page.get_by_role("button", name="Send").click()
            await expect(page.locator(".outcome")).to_contain_text("Answered by operator via web")
            assert page.url == f"{inbox.url}/requests/{other['request_id']}"
        finally:
            await ctx.close()


async def test_notifications_appear_live_and_dismiss(state_dir: Path, browser: Browser) -> None:
    async with (
        inbox_and_page(state_dir, browser) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
    ):
        result = sc(
            await client.call_tool(
                "notify_user", {"message": "Backup done", "title": "Nightly", "level": "success"}
            )
        )
        note = page.locator(".note", has_text="Backup done")
        await expect(note).to_be_visible()
        await note.get_by_role("button", name="Dismiss").click()
        await expect(note).to_have_count(0)
        await page.reload()
        await expect(page.get_by_text("No notifications.")).to_be_visible()
        shown = await api_get(inbox, f"/api/requests/{result['request_id']}")
        assert "dismissed" in [a["event"] for a in shown["audit"]]


async def test_system_notification_and_service_worker(state_dir: Path, browser: Browser) -> None:
    async with (
        inbox_and_page(state_dir, browser) as (inbox, ctx, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
    ):
        registered = await page.evaluate(
            "navigator.serviceWorker.ready.then((r) => r.active && new URL(r.active.scriptURL).pathname)"
        )
        assert registered == "/sw.js"
        # a stand-in for the browser's Notification, as if the person had allowed it and looked away
        await page.evaluate(
            """() => {
                window.__shown = [];
                window.Notification = class {
                    static permission = "granted";
                    constructor(title, options) { window.__shown.push([title, options.body]); }
                };
                document.hasFocus = () => false;
                Object.defineProperty(navigator, "serviceWorker", {value: undefined});
            }"""
        )
        await client.call_tool("ask_user", {"question": "Coffee or tea?", "wait_seconds": 0})
        await expect(page.locator("article.card", has_text="Coffee or tea?")).to_be_visible()
        await page.wait_for_function("window.__shown.length > 0")
        shown = await page.evaluate("window.__shown")
        assert shown[0][1] == "Coffee or tea?" and shown[0][0].startswith("Question from ")
        cached = await page.evaluate(
            "caches.keys().then(async (keys) => (await Promise.all(keys.map(async (k) =>"
            " (await (await caches.open(k)).keys()).map((r) => new URL(r.url).pathname)))).flat())"
        )
        assert cached and all(path.startswith("/static/") for path in cached), cached
        manifest = await (await ctx.request.get(f"{inbox.url}/manifest.webmanifest")).json()
        assert manifest["display"] == "standalone" and any(i["sizes"] == "512x512" for i in manifest["icons"])


async def keys_awake(page: Page) -> None:
    """The action keys rest for a moment after an answer: wait until they are awake again."""
    await expect(page.locator("body")).not_to_have_attribute("data-keys", "resting")


def _has(name: str) -> Any:
    import re

    return re.compile(rf"(^|\s){re.escape(name)}(\s|$)")


async def test_a_link_clicked_on_another_site_opens_for_a_signed_in_browser(
    state_dir: Path, browser: Browser
) -> None:
    """The session cookie is SameSite=Strict, so a click on another site (a web chat showing the
    host's link) arrives without it. The link page then loads itself again from our own origin,
    where the cookie is sent: a signed-in person lands on the request, and is not asked to sign in."""
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        broker = await inbox.runtime.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Flip the flag", channels=["web"]))
        link = RequestLinks(inbox.runtime.auth).issue(request.id, "elicitation", "host user", now() + 60)
        elsewhere = "http://chat.example.test/"

        async def chat_page(route: Any) -> None:
            await route.fulfill(
                content_type="text/html", body=f'<a id="go" href="{inbox.url}/link/{link}">Open it</a>'
            )

        await page.route(elsewhere, chat_page)
        await page.goto(elsewhere)
        await page.click("#go")
        await expect(page).to_have_url(f"{inbox.url}/requests/{request.id}")
        await expect(page.locator("article.card", has_text="Flip the flag")).to_be_visible()
        audit = [row.event for row in await broker.store.audit(request.id)]
        assert audit.count("link_opened") == 1
        # a browser that is not signed in goes the same way round, to the sign-in form; nothing is spent
        other = RequestLinks(inbox.runtime.auth).issue(request.id, "elicitation", "host user", now() + 60)
        stranger = await browser.new_context()
        try:
            lost = await stranger.new_page()
            await lost.route(
                elsewhere,
                lambda route: route.fulfill(
                    content_type="text/html", body=f'<a id="go" href="{inbox.url}/link/{other}">Open it</a>'
                ),
            )
            await lost.goto(elsewhere)
            await lost.click("#go")
            await expect(lost.get_by_role("button", name="Sign in and open it")).to_be_visible()
            assert lost.url == f"{inbox.url}/link/{other}"
        finally:
            await stranger.close()
        audit = [row.event for row in await broker.store.audit(request.id)]
        assert audit.count("link_opened") == 1
