"""The kill switch on every signed-in inbox page: while approvals are paused, a banner says who paused
them, since when and why, with a Resume button (a POST with the page's CSRF token); once resumed, or
never paused, no banner. Driven over HTTP with a real signed-in session, as ``test_rules`` does, and
at phone, narrow and desktop widths in headless Chromium."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.broker.test_rules import approval
from tests.conftest import running
from tests.mcp.test_elicitation import browser as inbox_browser
from tests.mcp.test_elicitation import csrf_of
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_browser import Browser, expect, inbox_and_page
from tests.web.test_inbox_layout import SIZES

browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = pytest.mark.anyio

BANNER = re.compile(r'<section class="banner banner-paused".*?</section>', re.S)


def banner_of(page: str) -> str | None:
    found = BANNER.search(page)
    return found.group(0) if found else None


def words_of(fragment: str) -> str:
    """The banner as a reader hears it: tags dropped, entities decoded, spaces squeezed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


async def test_the_front_page_shows_the_pause_and_its_resume_button_resumes(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(approval(channels=["web"]))
        async with inbox_browser(rt) as person:
            front = (await person.get("/")).text
            assert banner_of(front) is None and "Approvals are paused" not in front

            await broker.pause("alice", "deploy freeze")
            front = (await person.get("/")).text
            banner = banner_of(front)
            assert banner is not None, "the front page does not say approvals are paused"
            said = words_of(banner)
            assert said.startswith("Approvals are paused by alice since ")
            assert ": deploy freeze. New approvals are refused; deadlines wait." in said
            assert 'role="status"' in banner
            form = re.search(r'<form method="post" action="/resume">.*?</form>', banner, re.S)
            assert form is not None, "the banner has no Resume form"
            assert f'name="csrf" value="{csrf_of(front)}"' in form.group(0)
            assert "Resume approvals" in form.group(0)

            # the other signed-in pages carry it too; /rules has its own pause card instead
            for path in (f"/requests/{request.id}", "/history", f"/requests/{request.id}/remember"):
                assert banner_of((await person.get(path)).text) is not None, path
            rules = (await person.get("/rules")).text
            assert banner_of(rules) is None and "Approvals are paused" in rules

            resumed = await person.post("/resume", data={"csrf": csrf_of(front)})
            assert resumed.status_code == 303
            assert await broker.paused() is None
            assert banner_of((await person.get("/")).text) is None
            assert (await broker.get_or_raise(request.id)).is_open  # resuming answers nothing


async def test_a_pause_without_a_reason_reads_as_a_sentence(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        await (await rt.broker()).pause("bob")
        async with inbox_browser(rt) as person:
            banner = banner_of((await person.get("/")).text)
        assert banner is not None
        said = words_of(banner)
        assert said.startswith("Approvals are paused by bob since ")
        assert re.search(r"since [0-9-]+ [0-9:]+ UTC\. New approvals are refused; deadlines wait\.", said)


async def test_the_reason_is_escaped(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        await (await rt.broker()).pause("mallory", "<script>alert(1)</script> & more")
        async with inbox_browser(rt) as person:
            page = (await person.get("/")).text
        banner = banner_of(page)
        assert banner is not None
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in banner


@pytest.mark.parametrize("size", list(SIZES))
@shared.pytestmark[1]
async def test_the_banner_fits_and_resumes_at_every_width(
    state_dir: Path, browser: Browser, size: str
) -> None:
    async with inbox_and_page(state_dir, browser, **SIZES[size]) as (inbox, _, page):
        broker = await inbox.runtime.broker()
        await broker.pause("alice", "deploy freeze while the database migrates to the new cluster")
        await page.reload()
        banner = page.get_by_role("region", name="Approvals paused")
        await expect(banner.get_by_role("status")).to_contain_text("Approvals are paused by alice since")
        width = page.viewport_size["width"] if page.viewport_size else 0
        assert await page.evaluate("document.scrollingElement.scrollWidth") <= width, size
        resume = banner.get_by_role("button", name="Resume approvals")
        box = await resume.bounding_box()
        assert box is not None and box["height"] >= 44 and box["x"] >= 0 and box["x"] + box["width"] <= width
        await resume.click()
        await expect(page.locator("#pause-title")).to_have_text("Kill switch")  # on /rules, resumed
        assert await broker.paused() is None
        await page.goto(f"{inbox.url}/")
        await expect(page.locator("#paused-banner")).to_have_count(0)
