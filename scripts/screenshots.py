"""Regenerate the inbox screenshots of docs/inbox.md: docs/inbox-desktop.png, docs/inbox-phone.png and
docs/inbox-forced-colors.png (Chromium's forced-colours emulation, as in Windows high contrast, with
the first request selected as after pressing j).

Runs the real server in process on a free loopback port, over a throwaway state directory seeded
with a few requests, and photographs it with Debian's chromium through Playwright (``make
screenshots``; needs /usr/bin/chromium or $CHROMIUM). Name shots to take only those:
``scripts/screenshots.py forced-colors``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from playwright.async_api import Page, async_playwright, expect

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.config import parse_config
from hitl_mcp.core.models import Kind, Reply
from hitl_mcp.runtime import Runtime
from hitl_mcp.serving import HttpServer, bind

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TOKEN = "screenshot-token-0123456789"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-quic",
    "--disable-sync",
    "--hide-scrollbars",
    "--font-render-hinting=none",
]
CONFIG = f"""
channels:
  web: {{type: web, token: {TOKEN}}}
defaults:
  ask_user: {{timeout: 2h}}
  request_approval: {{timeout: 1h}}
"""


async def seed(broker: Broker) -> None:
    """A morning's worth of requests from two agents, oldest first."""

    async def ask(agent: str, session: str, **kw: object) -> str:
        spec = AskSpec(**{"kind": Kind.QUESTION, "client_name": agent, "session_key": session, **kw})  # type: ignore[arg-type]
        request, _ = await broker.ask(spec)
        return request.id

    done = await ask("claude-code", "conn:1", text="Which test runner should the new package use?")
    await broker.resolve(done, Reply(channel="web", responder="web inbox user", text="pytest, like the rest"))
    done = await ask(
        "cursor",
        "conn:2",
        kind=Kind.APPROVAL,
        text="Delete 14 stale feature branches",
        payload={"command": "git push origin --delete", "branches": ["exp/a", "exp/b"]},
        risk="medium",
    )
    await broker.resolve(
        done, Reply(channel="cli", responder="ana (terminal)", decision="deny", comment="keep exp/*")
    )
    await ask("cursor", "conn:2", text="Rename the `utils` module?", timeout_seconds=0.01)
    await broker.notify(
        AskSpec(
            kind=Kind.NOTIFICATION,
            text="Nightly build finished: 1,284 tests passed in 6 min 12 s.",
            title="Build green",
            level="success",
            client_name="ci-agent",
            session_key="conn:3",
        )
    )
    await broker.notify(
        AskSpec(
            kind=Kind.NOTIFICATION,
            text="Disk usage on build-02 is at 91%. I paused the artifact upload until you decide.",
            title="Disk almost full",
            level="warning",
            client_name="ops-agent",
            session_key="conn:4",
        )
    )
    await ask(
        "cursor",
        "conn:2",
        text="The login page has two designs in Figma. Which one should I build?",
        choices=["Split screen", "Centered card", "Ask the designer"],
        context="Both pass the contrast check. 'Split screen' needs a new hero image.",
    )
    await ask(
        "claude-code",
        "conn:1",
        text="What should the changelog entry for the retry fix say?",
        context="PR #482 makes webhook retries honour Retry-After and caps them at 5.",
    )
    await ask(
        "claude-code",
        "conn:1",
        kind=Kind.APPROVAL,
        text="Run the database migration on production",
        details="Adds an index on replies. About 40 s; reads keep working, writes wait.",
        payload={"command": "alembic upgrade head", "env": "production", "revision": "7f3c2a1d9e04"},
        risk="high",
    )


@contextlib.asynccontextmanager
async def live_server(state_dir: Path) -> AsyncIterator[tuple[str, Runtime]]:
    runtime = Runtime(parse_config(CONFIG, source="screenshots.yaml"), state_dir)
    sock = bind("127.0.0.1", 0)
    assert sock is not None
    port = sock.getsockname()[1]
    app = runtime.http_app(None, "stdio", "127.0.0.1")
    http = HttpServer(app, sock)
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        async with anyio.create_task_group() as web:
            web.start_soon(http.run)  # the socket already listens: early connections wait in its backlog
            try:
                yield f"http://127.0.0.1:{port}", runtime
            finally:
                http.stop()
        sock.close()
        tg.cancel_scope.cancel()


async def shoot(page: Page, base: str, path: Path, *, select: bool = False) -> None:
    await page.goto(f"{base}/login?token={TOKEN}")
    await expect(page.locator("#live")).to_have_attribute("data-state", "on")
    await expect(page.locator(".card").first).to_be_visible()
    if select:
        await page.keyboard.press("j")
        await expect(page.locator(".card.selected")).to_have_count(1)
    await page.evaluate("document.fonts.ready")
    await page.screenshot(path=str(path), full_page=False)
    print(f"wrote {path.relative_to(ROOT)}")


DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 1000}, "device_scale_factor": 1}
PHONE: dict[str, Any] = {
    "viewport": {"width": 375, "height": 812},
    "device_scale_factor": 2,
    "is_mobile": True,
    "has_touch": True,
}
SHOTS: dict[str, tuple[dict[str, Any], bool]] = {  # name: (browser context, select the first card)
    "desktop": ({**DESKTOP, "color_scheme": "light"}, False),
    "phone": ({**PHONE, "color_scheme": "light"}, False),
    "forced-colors": ({**DESKTOP, "color_scheme": "light", "forced_colors": "active"}, True),
}


async def main(names: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        async with live_server(Path(tmp)) as (base, runtime):
            await seed(await runtime.broker())
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    for name in names:
                        options, select = SHOTS[name]
                        context = await browser.new_context(**options)
                        page = await context.new_page()
                        await shoot(page, base, DOCS / f"inbox-{name}.png", select=select)
                        await context.close()
                finally:
                    await browser.close()
    return 0


if __name__ == "__main__":
    if not Path(CHROMIUM).exists():
        sys.exit(f"screenshots: no chromium at {CHROMIUM} (apt-get install chromium, or set $CHROMIUM)")
    wanted = sys.argv[1:] or list(SHOTS)
    if unknown := [name for name in wanted if name not in SHOTS]:
        sys.exit(f"screenshots: no shot named {', '.join(unknown)} (there are: {', '.join(SHOTS)})")
    DOCS.mkdir(exist_ok=True)
    sys.exit(anyio.run(main, wanted))
