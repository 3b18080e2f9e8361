"""The sign-in page in real headless Chromium: it names the inbox's real address, and takes the web
token in a field (POST, with the form's own CSRF token, and a limit on wrong tokens per address).

Shares the Chromium, the server and the helpers of ``test_inbox_browser``.
"""

from __future__ import annotations

from pathlib import Path

from hitl_mcp.config import parse_config
from tests.conftest import TOKEN
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_browser import Browser, expect
from tests.web.test_inbox_pages import serve_inbox

browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = shared.pytestmark


async def test_the_sign_in_page_names_the_address_the_browser_used(state_dir: Path, browser: Browser) -> None:
    async with serve_inbox(state_dir) as inbox:
        port = inbox.url.rsplit(":", 1)[1]
        ctx = await browser.new_context()
        try:
            page = await ctx.new_page()
            for base in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
                response = await page.goto(f"{base}/history")
                assert response is not None and response.status == 401
                await expect(page.get_by_role("heading", name="Sign in to the inbox")).to_be_visible()
                await expect(page.locator(".signin-address")).to_have_text(f"{base}/login?token=…")
                assert "8765" not in await page.content()
        finally:
            await ctx.close()
    public = parse_config(
        "server: {public_url: 'https://hitl.example.com/'}\n"
        f"channels:\n  web: {{type: web, token: {TOKEN}}}\n",
        source="test.yaml",
    )
    async with serve_inbox(state_dir, config=public) as inbox:
        ctx = await browser.new_context()
        try:
            page = await ctx.new_page()
            await page.goto(f"{inbox.url}/")
            await expect(page.locator(".signin-address")).to_have_text(
                "https://hitl.example.com/login?token=…"
            )
        finally:
            await ctx.close()


async def test_the_token_field_signs_in_and_keeps_the_token_out_of_the_address(
    state_dir: Path, browser: Browser
) -> None:
    async with serve_inbox(state_dir) as inbox:
        ctx = await browser.new_context()
        try:
            page = await ctx.new_page()
            await page.goto(f"{inbox.url}/")
            field = page.get_by_label("Web token")
            await expect(field).to_have_attribute("type", "password")
            await field.fill("not-the-token")
            async with page.expect_response(f"{inbox.url}/login") as wrong:
                await page.get_by_role("button", name="Sign in", exact=True).click()
            assert (await wrong.value).request.method == "POST" and (await wrong.value).status == 401
            problem = page.locator(".signin .form-error")
            await expect(problem).to_have_text("That is not the web token. Try again.")
            await page.get_by_label("Web token").fill(TOKEN)
            await page.get_by_role("button", name="Sign in", exact=True).click()
            await expect(page.get_by_role("heading", name="Waiting for you")).to_be_visible()
            assert page.url == f"{inbox.url}/"
            await expect(page.locator("#live")).to_have_attribute("data-state", "on")
            names = {c["name"] for c in await ctx.cookies()}
            port = inbox.url.rsplit(":", 1)[1]
            assert f"hitl_session_{port}" in names
            assert f"hitl_signin_{port}" not in names  # the form's nonce has done its work
            history = await page.evaluate("performance.getEntriesByType('navigation').map((e) => e.name)")
            assert not any(TOKEN in url for url in history)
        finally:
            await ctx.close()


async def test_the_token_form_refuses_a_post_without_its_csrf_token(
    state_dir: Path, browser: Browser
) -> None:
    """The right token, sent without the form's CSRF token or without the cookie it stands for (what a
    page on another site could send), starts no session."""
    async with serve_inbox(state_dir) as inbox:
        ctx = await browser.new_context()
        stranger = await browser.new_context()
        try:
            page = await ctx.new_page()
            await page.goto(f"{inbox.url}/")
            csrf = await page.locator('.signin-form input[name="csrf"]').get_attribute("value")
            assert csrf
            url = f"{inbox.url}/login"
            no_csrf = await ctx.request.post(url, form={"token": TOKEN}, max_redirects=0)
            wrong = await ctx.request.post(url, form={"token": TOKEN, "csrf": "0" * 64}, max_redirects=0)
            no_cookie = await stranger.request.post(url, form={"token": TOKEN, "csrf": csrf}, max_redirects=0)
            assert [no_csrf.status, wrong.status, no_cookie.status] == [403, 403, 403]
            for context in (ctx, stranger):
                assert not any(c["name"].startswith("hitl_session") for c in await context.cookies())
            good = await ctx.request.post(url, form={"token": TOKEN, "csrf": csrf}, max_redirects=0)
            assert good.status == 303 and good.headers["location"] == "/"
        finally:
            await stranger.close()
            await ctx.close()


async def test_wrong_tokens_are_limited_per_address(state_dir: Path, browser: Browser) -> None:
    async with serve_inbox(state_dir) as inbox:
        ctx = await browser.new_context()
        try:
            page = await ctx.new_page()
            await page.goto(f"{inbox.url}/")
            for _ in range(5):
                await page.get_by_label("Web token").fill("guess")
                async with page.expect_response(f"{inbox.url}/login") as answer:
                    await page.get_by_role("button", name="Sign in", exact=True).click()
                assert (await answer.value).status == 401
            await page.get_by_label("Web token").fill(TOKEN)  # now even the right token waits
            async with page.expect_response(f"{inbox.url}/login") as answer:
                await page.get_by_role("button", name="Sign in", exact=True).click()
            limited = await answer.value
            assert limited.status == 429
            wait = int(await limited.header_value("retry-after") or "0")
            assert 50 <= wait <= 60
            await expect(page.get_by_role("heading", name="Too many wrong tokens")).to_be_visible()
            await expect(page.locator(".signin .form-error")).to_have_text(
                f"Too many wrong tokens from your address. Try again in {wait} s."
            )
            link = await page.goto(f"{inbox.url}/login?token={TOKEN}")  # the login link waits too
            assert link is not None and link.status == 429
        finally:
            await ctx.close()
