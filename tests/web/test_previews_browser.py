"""Previews in the inbox, in headless Chromium: each kind drawn as it should be (a diff with line
numbers and its file list, side by side on a desktop and unified on a phone; SQL pretty-printed; a
table that scrolls inside its box), the decision buttons only below the whole preview, no page wider
than a 375 px phone, axe-core finding nothing in light and dark; and a preview too long for a chat
approved in the inbox reaches the agent waiting on it.

With ``HITL_SCREENSHOTS=1`` the pictures of docs/previews.md are written to docs/previews/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind
from tests.conftest import ROOT, bearer
from tests.support.previews import KINDS, long_diff
from tests.web.test_inbox_access import AXE, AXE_RUN, PHONE
from tests.web.test_inbox_browser import Browser, Call, anyio_backend, browser, expect, inbox_and_page

pytestmark = pytest.mark.anyio
__all__ = ["anyio_backend", "browser"]

SHOTS = ROOT / "docs" / "previews"
DESKTOP = {"viewport": {"width": 1280, "height": 900}}


async def seed(inbox: Any) -> dict[str, str]:
    broker = await inbox.runtime.broker()
    ids = {}
    for kind, preview in KINDS.items():
        spec = AskSpec(
            kind=Kind.APPROVAL,
            text=f"Approve the {kind}",
            preview=preview,
            client_name="claude-code",
            session_key="s1",
        )
        request, _ = await broker.ask(spec)
        ids[kind] = request.id
    return ids


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [375, 1280])
async def test_each_kind_is_drawn_below_its_buttons_axe_clean(
    state_dir: Path, browser: Browser, scheme: str, width: int
) -> None:
    if not AXE.exists():
        missing = f"no {AXE.relative_to(ROOT)}: run npm ci --prefix tests/ts"
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    size = PHONE if width == 375 else DESKTOP
    found: list[str] = []
    async with inbox_and_page(state_dir, browser, color_scheme=scheme, **size) as (inbox, ctx, page):
        await ctx.add_init_script(path=str(AXE))
        ids = await seed(inbox)
        for kind, rid in ids.items():
            await page.goto(f"{inbox.url}/requests/{rid}")
            preview = page.locator(".preview")
            await expect(preview).to_be_visible()
            found.extend(await page.evaluate(AXE_RUN, f"{scheme} {width}px {kind}"))
            # the buttons come after the whole preview
            below = await page.evaluate(
                """() => {
                    const p = document.querySelector('.preview').getBoundingClientRect();
                    const b = document.querySelector('[data-action=approve]').getBoundingClientRect();
                    return b.top >= p.bottom;
                }"""
            )
            assert below, kind
            assert await page.evaluate("document.scrollingElement.scrollWidth") <= width, kind
            if os.environ.get("HITL_SCREENSHOTS") and scheme == "light":
                SHOTS.mkdir(exist_ok=True)
                name = f"{kind}-{'phone' if width == 375 else 'desktop'}.png"
                await preview.screenshot(path=str(SHOTS / name))
        await page.goto(f"{inbox.url}/requests/{ids['diff']}")
        view = "unified" if width == 375 else "split"
        table = page.locator(f".diff-{view}").first
        await expect(table).to_be_visible()
        await expect(page.locator(".file-list li")).to_have_count(2)
        await expect(table).to_contain_text("timeout=30, pool=4")
        numbers = await table.locator("tr.d-added td.ln, td.ln.d-added").all_inner_texts()
        assert "7" in numbers, numbers  # the new line's number
        await page.goto(f"{inbox.url}/requests/{ids['sql']}")
        await expect(page.locator(".preview-body pre").first).to_contain_text("DELETE FROM invoices\nWHERE")
        await page.goto(f"{inbox.url}/requests/{ids['table']}")
        box = page.locator(".table-scroll")
        await expect(box.locator("tbody tr")).to_have_count(14)
        if width == 375:  # wider than the phone: it scrolls in its box, the page does not
            assert await box.evaluate("e => e.scrollWidth > e.clientWidth")
        await page.goto(f"{inbox.url}/")
        found.extend(await page.evaluate(AXE_RUN, f"{scheme} {width}px inbox with previews"))
    assert found == []


async def test_a_preview_too_long_for_chat_is_approved_in_the_inbox(
    state_dir: Path, browser: Browser
) -> None:
    async with (
        inbox_and_page(state_dir, browser, **DESKTOP) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
    ):
        import anyio

        call = Call(client, "request_approval", {"action": "Rewrite settings.py", "preview": long_diff(1000)})
        async with anyio.create_task_group() as tg:
            tg.start_soon(call.run)
            card = page.locator("article.card")
            await expect(card).to_have_count(1)
            # the list does not show all of it: no Approve there, a link to the whole preview
            await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
            await card.get_by_role("link", name="Review the whole preview").click()
            await expect(page.locator(".diff-split")).to_contain_text("value_999 = 1998")  # to its end
            await page.get_by_role("button", name="Approve").click()
            outcome = await call.outcome()
        assert outcome["approved"] is True and outcome["preview_sha256"]
        assert outcome["channel"] == "web"
