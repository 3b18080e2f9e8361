"""The inbox in real headless Chromium: one agent that reconnects is one group, toasts never cover a
card's "Details & trail", and the phone's footer offers no keyboard help.

Shares the Chromium, the server and the helpers of ``test_inbox_browser``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.config import parse_config
from hitl_mcp.core import delegation
from tests.conftest import TOKEN, bearer, sc
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_access import PHONE, ask
from tests.web.test_inbox_browser import Browser, expect, inbox_and_page
from tests.web.test_inbox_pages import serve_inbox

browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = shared.pytestmark

SIZES = {
    "phone": PHONE,
    "narrow window": {"viewport": {"width": 820, "height": 800}},
    "desktop": {"viewport": {"width": 1280, "height": 800}},
}


async def test_an_agent_that_reconnects_is_one_group(state_dir: Path, browser: Browser) -> None:
    """Grouped by the client's name and the principal it asks as (over HTTP, its credential; over
    stdio, ``server.agent``), not by MCP session: each reconnect is a new session."""
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        for n in range(3):  # three sessions of the same agent
            async with Client(
                bearer(f"{inbox.url}/mcp"), client_info=Implementation(name="claude-code", version="1")
            ) as c:
                sc(
                    await c.call_tool(
                        "ask_user", {"question": f"Question {n} from claude-code", "wait_seconds": 0}
                    )
                )
        async with Client(
            bearer(f"{inbox.url}/mcp"), client_info=Implementation(name="cursor", version="1")
        ) as c:
            sc(await c.call_tool("ask_user", {"question": "One from cursor", "wait_seconds": 0}))
        await expect(page.locator("article.card")).to_have_count(4)
        groups = page.locator("section.group")
        await expect(groups).to_have_count(2)
        await expect(
            page.get_by_role("region", name="From claude-code (the operator)").locator("article.card")
        ).to_have_count(3)
        await expect(
            page.get_by_role("region", name="From cursor (the operator)").locator("article.card")
        ).to_have_count(1)

    labelled = parse_config(
        f"server: {{agent: release-bot}}\nchannels:\n  web: {{type: web, token: {TOKEN}}}\n",
        source="test.yaml",
    )
    (state_dir / "labelled").mkdir()
    async with serve_inbox(state_dir / "labelled", config=labelled) as inbox:
        ctx = await browser.new_context()
        try:
            page = await ctx.new_page()
            await page.goto(f"{inbox.url}/login?token={TOKEN}")
            for n in range(2):  # over stdio (in process), where server.agent labels the host
                async with Client(
                    inbox.runtime.build_mcp(), client_info=Implementation(name="claude-code", version="1")
                ) as c:
                    sc(await c.call_tool("ask_user", {"question": f"Release {n}?", "wait_seconds": 0}))
            await page.reload()
            group = page.get_by_role("region", name="From claude-code (release-bot)")
            await expect(group.locator("article.card")).to_have_count(2)
            await expect(group.locator(".group-head")).to_contain_text("release-bot")
        finally:
            await ctx.close()


COVERED = """(link) => {
    const box = link.getBoundingClientRect();
    const y = box.top + box.height / 2;
    const points = [[box.left + 2, y], [box.left + box.width / 2, y], [box.right - 2, y]];
    return points.some(([x, y]) => !link.contains(document.elementFromPoint(x, y)));
}"""


@pytest.mark.parametrize("size", list(SIZES))
async def test_toasts_never_cover_details_and_trail(state_dir: Path, browser: Browser, size: str) -> None:
    async with inbox_and_page(state_dir, browser, **SIZES[size]) as (inbox, _, page):
        long = "Rotate the signing keys of every service in the production cluster, then restart them all"
        ids = [await ask(inbox, text=f"{long} ({n})", payload={"n": n}) for n in range(3)]
        await expect(page.locator("article.card")).to_have_count(3)
        await page.keyboard.press("a")  # nothing selected: a third toast
        await expect(page.locator("#toasts .toast")).to_have_count(3)  # two "New approval" and that one
        for rid in ids:
            link = page.locator(f"#r-{rid}").get_by_role("link", name="Details & trail")
            for where in ("end", "center"):  # where the foot of the card being read is
                await link.evaluate(f"(el) => el.scrollIntoView({{block: '{where}'}})")
                covered: Any = await link.evaluate(COVERED)
                assert covered is False, (size, rid, where)
        await expect(page.locator("#toasts .toast")).to_have_count(3)  # they were there all along


async def test_the_phone_footer_has_no_keyboard_help(state_dir: Path, browser: Browser) -> None:
    async with inbox_and_page(state_dir, browser, **PHONE) as (_, _, page):
        foot = page.locator("footer.foot")
        await expect(foot).to_be_visible()
        await expect(foot.get_by_role("button", name="Keyboard shortcuts")).to_be_hidden()
        assert (await foot.inner_text()).strip().startswith("hitl-mcp ")
        assert "Keyboard" not in await foot.inner_text()
    async with inbox_and_page(state_dir, browser) as (_, _, page):  # a desktop keeps it
        await expect(
            page.locator("footer.foot").get_by_role("button", name="Keyboard shortcuts")
        ).to_be_visible()


async def test_the_top_bar_at_375_px_keeps_rules_and_the_keyboard_help(
    state_dir: Path, browser: Browser
) -> None:
    """At 375 px the top bar dropped **Rules** (the kill switch was then in the footer only) and **?**.
    Rules stays on every width; ? wherever the pointer hovers (a narrow desktop window), not on a touch
    phone, whose footer has no keyboard help either."""
    narrow_window = {"viewport": {"width": 375, "height": 740}}
    for context, keyboard in ((PHONE, False), (narrow_window, True)):
        async with inbox_and_page(state_dir, browser, **context) as (_, _, page):
            bar = page.locator("header.topbar")
            tabs = [
                bar.locator('nav a[href="/"]'),
                *(bar.get_by_role("link", name=n, exact=True) for n in ("History", "Rules")),
            ]
            for tab in tabs:
                await expect(tab).to_be_visible()
                box = await tab.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
                assert box["height"] >= 44
            shortcuts = bar.get_by_role("button", name="Keyboard shortcuts")
            if keyboard:
                await expect(shortcuts).to_be_visible()
            else:
                await expect(shortcuts).to_be_hidden()
            assert await page.evaluate("document.documentElement.scrollWidth") <= 375
            await bar.get_by_role("link", name="Rules", exact=True).click()
            await expect(page.get_by_role("button", name="Pause approvals")).to_be_visible()


async def test_away_has_room_above_it_and_preselects_nobody(state_dir: Path, browser: Browser) -> None:
    people = parse_config(
        f"people:\n  owner: {{web: owner}}\n  backup: {{web: backup}}\n"
        f"channels:\n  web: {{type: web, token: {TOKEN}}}\n",
        source="test.yaml",
    )
    async with serve_inbox(state_dir, config=people) as inbox:
        async with Client(bearer(f"{inbox.url}/mcp")) as client:
            sc(await client.call_tool("notify_user", {"message": "Build finished"}))
        for size in (PHONE, SIZES["desktop"]):
            ctx = await browser.new_context(**size)
            try:
                page = await ctx.new_page()
                await page.goto(f"{inbox.url}/login?token={TOKEN}")
                heading = page.get_by_role("heading", name="Away")
                await expect(heading).to_be_visible()
                notes, away = await page.locator("#notes").bounding_box(), await heading.bounding_box()
                assert notes is not None and away is not None
                assert away["y"] - (notes["y"] + notes["height"]) >= 16, (size, notes, away)
                # a delegation is a choice of two people: none is made in advance
                assert await page.locator("#away-from").input_value() == ""
                assert await page.locator("#away-to").input_value() == ""
                await page.locator("#away-until").fill("2099-01-01T00:00")
                await page.get_by_role("button", name="Set delegation").click()  # the browser asks first
                assert await page.locator("#away-from").evaluate("(el) => el.validity.valueMissing")
                broker = await inbox.runtime.broker()
                assert await delegation.stored(broker.store) == []
            finally:
                await ctx.close()
