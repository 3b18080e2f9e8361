"""People sign in to the inbox as themselves, in real headless Chromium with its virtual authenticator
(the DevTools WebAuthn domain, through Playwright): enrolment links, passkey sign-in, a quorum filled
by two people from their own browsers, and what a person may not answer.

Passkeys need a host name as the relying party: the pages are opened on ``localhost``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.config import load_config
from hitl_mcp.core.models import Kind, Status, now
from hitl_mcp.core.principal import token_digest
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.web.passkeys import INVITE
from hitl_mcp.web.stepup import check_offline
from tests.conftest import ROOT, TOKEN, cli, free_port, write_config
from tests.support.events import until
from tests.support.harness import watching
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_access import AXE, AXE_RUN, PHONE
from tests.web.test_inbox_browser import Browser, BrowserContext, Page, expect
from tests.web.test_inbox_pages import Inbox, serve_inbox

browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = shared.pytestmark

PEOPLE = f"""
channels:
  web: {{type: web, token: {TOKEN}, operator_answers: unaddressed}}
people:
  olive: {{terminal: olive}}
  lead: {{terminal: lead}}
"""


@dataclass
class Person:
    name: str
    context: BrowserContext
    page: Page
    cdp: Any
    authenticator: str

    async def credentials(self) -> list[dict[str, Any]]:
        found = await self.cdp.send("WebAuthn.getCredentials", {"authenticatorId": self.authenticator})
        return list(found["credentials"])


@contextlib.asynccontextmanager
async def people_inbox(state_dir: Path, tmp_path: Path) -> AsyncIterator[tuple[Inbox, Path, str]]:
    """The server with two people, its config file (for the CLI), and its address on localhost."""
    config = write_config(tmp_path / "hitl.yaml", free_port(), PEOPLE)
    async with serve_inbox(state_dir, config=load_config(config)) as inbox:
        yield inbox, config, inbox.url.replace("127.0.0.1", "localhost")


async def with_authenticator(browser: Browser, name: str, **options: Any) -> Person:
    """A browser context of its own with a virtual platform authenticator (UV, resident keys)."""
    context = await browser.new_context()
    page = await context.new_page()
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable")
    made = await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
                **options,
            }
        },
    )
    return Person(name, context, page, cdp, made["authenticatorId"])


async def invite(state_dir: Path, config: Path, name: str) -> str:
    """``hitl-mcp people invite NAME``: the link's path."""
    code, out, err = await cli(state_dir, "people", "invite", name, "--config", str(config))
    assert code == 0, err
    link = out.splitlines()[0]
    assert link.startswith("http://localhost:") and f"/enrol/{name}/" in link, out
    return "/" + link.split("/", 3)[3]


async def enrolled(person: Person, base: str, path: str) -> None:
    await person.page.goto(base + path)
    await expect(
        person.page.get_by_role("heading", name=f"Register a passkey for {person.name}")
    ).to_be_visible()
    await person.page.get_by_role("button", name="Register a passkey").click()
    await expect(person.page.locator("[data-who]")).to_have_text(person.name)


async def test_two_people_enrol_sign_in_and_fill_a_quorum_from_their_own_browsers(
    state_dir: Path, tmp_path: Path, browser: Browser
) -> None:
    async with people_inbox(state_dir, tmp_path) as (inbox, config, base):
        olive = await with_authenticator(browser, "olive")
        lead = await with_authenticator(browser, "lead")
        try:
            for person in (olive, lead):
                await enrolled(person, base, await invite(state_dir, config, person.name))
            assert [c["rpId"] for c in await olive.credentials()] == ["localhost"]

            # signing in again, with the passkey alone (no token)
            await olive.context.clear_cookies()
            await olive.page.goto(base + "/")
            await olive.page.get_by_role("button", name="Sign in with a passkey").click()
            await expect(olive.page.locator("[data-who]")).to_have_text("olive")

            broker = await inbox.runtime.broker()
            both, _ = await broker.ask(
                AskSpec(
                    kind=Kind.APPROVAL,
                    text="Rotate the prod keys",
                    approvals=Quorum(required=2, of=["olive", "lead"]),
                )
            )
            other, _ = await broker.ask(
                AskSpec(kind=Kind.QUESTION, text="Lunch?")
            )  # asked of nobody in particular
            await olive.page.goto(base + "/")
            mine = olive.page.get_by_role("region", name="Asked of you")
            await expect(mine.locator(f"#r-{both.id}")).to_be_visible()
            await expect(mine.locator(f"#r-{other.id}")).to_have_count(0)
            for count, person in enumerate((olive, lead), 1):
                await person.page.goto(f"{base}/requests/{both.id}")
                await person.page.get_by_role("button", name="Approve").first.click()
                with watching(broker, both.id) as changes:
                    await until(lambda n=count: _votes(broker, both.id, n), changes)
            done = await broker.wait(both.id, 10)
            assert done.status == Status.ANSWERED and done.approved is True
            assert [(v.person, v.responder, v.channel) for v in done.votes] == [
                ("olive", "olive", "web"),
                ("lead", "lead", "web"),
            ]
        finally:
            await olive.context.close()
            await lead.context.close()


async def test_a_person_cannot_answer_what_was_asked_of_someone_else_nor_the_operator_a_quorum(
    state_dir: Path, tmp_path: Path, browser: Browser
) -> None:
    async with people_inbox(state_dir, tmp_path) as (inbox, config, base):
        olive = await with_authenticator(browser, "olive")
        try:
            await enrolled(olive, base, await invite(state_dir, config, "olive"))
            broker = await inbox.runtime.broker()
            for_lead, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart", to=["lead"]))
            csrf = await olive.page.locator('meta[name="csrf-token"]').get_attribute("content")
            said = await olive.page.request.post(
                f"{base}/api/requests/{for_lead.id}/reply",
                data={"decision": "approve"},
                headers={"X-CSRF-Token": csrf or ""},
            )
            assert said.status == 403 and "not asked of olive" in (await said.json())["error"]
            # the operator (operator_answers: unaddressed) may not either
            async with httpx2.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
                r = await api.post(f"/api/requests/{for_lead.id}/reply", json={"decision": "approve"})
                assert r.status_code == 403 and "asked of people" in r.json()["error"]
            assert (await broker.get_or_raise(for_lead.id)).status == Status.PENDING
            # lead away, olive standing in: now she may
            await broker.set_delegation("lead", "olive", now() + 3600, None, "test")
            said = await olive.page.request.post(
                f"{base}/api/requests/{for_lead.id}/reply",
                data={"decision": "approve"},
                headers={"X-CSRF-Token": csrf or ""},
            )
            assert said.status == 200, await said.text()
            done = await broker.get_or_raise(for_lead.id)
            assert (done.person, done.on_behalf_of, done.responder) == ("olive", "lead", "olive")
        finally:
            await olive.context.close()


async def test_an_enrolment_link_works_once_before_it_expires_and_only_for_its_person(
    state_dir: Path, tmp_path: Path, browser: Browser
) -> None:
    async with people_inbox(state_dir, tmp_path) as (inbox, config, base):
        olive = await with_authenticator(browser, "olive")
        lead = await with_authenticator(browser, "lead")
        try:
            path = await invite(state_dir, config, "olive")
            token = path.rsplit("/", 1)[1]
            # olive's link under lead's name: not valid
            await lead.page.goto(f"{base}/enrol/lead/{token}")
            await expect(lead.page.get_by_text("This enrolment link is not valid.")).to_be_visible()
            await enrolled(olive, base, path)
            # used: a second browser cannot register with it
            await lead.page.goto(base + path)
            await expect(lead.page.get_by_text("already used")).to_be_visible()
            started = await lead.page.request.post(base + path + "/options", data={})
            assert started.status == 409
            # expired
            broker = await inbox.runtime.broker()
            stale = "s" * 43
            await broker.store.add_credential(
                INVITE, "lead", token_digest(stale), {"expires_at": now() - 1}, "test"
            )
            await lead.page.goto(f"{base}/enrol/lead/{stale}")
            await expect(lead.page.get_by_text("This enrolment link has expired")).to_be_visible()
            assert (await lead.page.request.post(f"{base}/enrol/lead/{stale}/options", data={})).status == 410
            assert await lead.credentials() == []
        finally:
            await olive.context.close()
            await lead.context.close()


async def test_a_copied_passkey_whose_sign_count_goes_back_is_refused(
    state_dir: Path, tmp_path: Path, browser: Browser
) -> None:
    async with people_inbox(state_dir, tmp_path) as (inbox, config, base):
        olive = await with_authenticator(browser, "olive")
        clone = await with_authenticator(browser, "olive")
        try:
            await enrolled(olive, base, await invite(state_dir, config, "olive"))
            await olive.context.clear_cookies()
            await olive.page.goto(base + "/")
            await olive.page.get_by_role("button", name="Sign in with a passkey").click()
            await expect(olive.page.locator("[data-who]")).to_have_text("olive")
            (key,) = await olive.credentials()
            assert key["signCount"] >= 2
            copied = {
                k: key[k]
                for k in ("credentialId", "isResidentCredential", "rpId", "privateKey", "userHandle")
            }
            await clone.cdp.send(
                "WebAuthn.addCredential",
                {"authenticatorId": clone.authenticator, "credential": {**copied, "signCount": 1}},
            )
            await clone.page.goto(base + "/")
            await clone.page.get_by_role("button", name="Sign in with a passkey").click()
            await expect(
                clone.page.get_by_text("Not signed in: the sign count did not go up")
            ).to_be_visible()
            assert await clone.context.cookies() == [] or all(
                "session" not in c["name"] for c in await clone.context.cookies()
            )
            broker = await inbox.runtime.broker()
            assert any(a.event == "passkey_refused" for a in await broker.store.audit())
        finally:
            await olive.context.close()
            await clone.context.close()


async def _votes(broker: Any, request_id: str, count: int) -> bool:
    return len((await broker.get_or_raise(request_id)).votes) >= count


# --- step-up: a high-risk approval counts only with a passkey assertion bound to it ----------------

ASSERT = """async (options) => {
    const bytes = (t) => Uint8Array.from(
        atob(t.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((t.length + 3) % 4)),
        (c) => c.charCodeAt(0));
    const text = (b) => btoa(String.fromCharCode(...new Uint8Array(b)))
        .replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
    options.challenge = bytes(options.challenge);
    options.allowCredentials = (options.allowCredentials || []).map((c) => ({...c, id: bytes(c.id)}));
    const c = await navigator.credentials.get({publicKey: options});
    const r = c.response;
    return {id: c.id, rawId: text(c.rawId), type: c.type, clientExtensionResults: {}, response: {
        clientDataJSON: text(r.clientDataJSON), authenticatorData: text(r.authenticatorData),
        signature: text(r.signature)}};
}"""


async def step_up_body(person: Person, base: str, request_id: str, csrf: str) -> dict[str, Any]:
    """A step-up made in the person's browser for ``request_id``: the reply body that carries it."""
    started = await person.page.request.post(
        f"{base}/api/requests/{request_id}/step-up",
        data={"decision": "approve"},
        headers={"X-CSRF-Token": csrf},
    )
    assert started.status == 200, await started.text()
    given = await started.json()
    credential = await person.page.evaluate(ASSERT, given["options"])
    return {"decision": "approve", "step_up": {"state": given["state"], "credential": credential}}


async def test_a_high_risk_approval_counts_only_with_a_passkey_assertion_bound_to_it(
    state_dir: Path, tmp_path: Path, browser: Browser
) -> None:
    async with people_inbox(state_dir, tmp_path) as (inbox, config, base):
        olive = await with_authenticator(browser, "olive")
        try:
            await enrolled(olive, base, await invite(state_dir, config, "olive"))
            broker = await inbox.runtime.broker()

            async def high(text: str, payload: Any) -> str:
                request, _ = await broker.ask(
                    AskSpec(kind=Kind.APPROVAL, text=text, payload=payload, risk="high", to=["olive"])
                )
                assert request.step_up
                return request.id

            deploy = await high("Deploy v3", {"tag": "v3"})
            drop = await high("Drop the table", {"table": "orders"})
            csrf = await olive.page.locator('meta[name="csrf-token"]').get_attribute("content") or ""

            async def reply(request_id: str, body: dict[str, Any]) -> Any:
                return await olive.page.request.post(
                    f"{base}/api/requests/{request_id}/reply", data=body, headers={"X-CSRF-Token": csrf}
                )

            # without the assertion: refused, and a denial needs none
            plain = await reply(deploy, {"decision": "approve"})
            assert plain.status == 422 and "only with a passkey" in (await plain.json())["error"]
            # an assertion made for another request (another payload) does not carry over
            for_deploy = await step_up_body(olive, base, deploy, csrf)
            elsewhere = await reply(drop, for_deploy)
            assert elsewhere.status == 403 and "another request" in (await elsewhere.json())["error"]
            assert (await broker.get_or_raise(drop)).status == Status.PENDING

            # in the page: the only approve button is the passkey's
            await olive.page.goto(f"{base}/requests/{deploy}")
            await expect(olive.page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
            # the page goes to the request's page once the approval is taken: awaited, so that the
            # next evaluate does not run in a document being replaced
            async with olive.page.expect_navigation():
                await olive.page.get_by_role("button", name="Approve with your passkey").click()
            with watching(broker, deploy) as changes:
                await until(lambda: _settled(broker, deploy), changes)
            done = await broker.get_or_raise(deploy)
            assert (done.approved, done.person, done.responder) == (True, "olive", "olive")
            (kept,) = [r for r in await broker.store.replies(deploy) if r.won]
            assert kept.proof is not None and kept.proof["payload_sha256"] == done.payload_sha256
            assert check_offline(kept.proof)
            assert not check_offline({**kept.proof, "payload_sha256": "0" * 64})  # another payload: no

            # replayed: the same assertion again is refused, whatever it is sent to
            again = await step_up_body(olive, base, drop, csrf)
            assert (await reply(drop, again)).status == 200
            replayed = await reply(drop, again)
            assert replayed.status == 403 and "already used" in (await replayed.json())["error"]
            denied = await high("Rotate keys", {"k": 1})
            assert (await reply(denied, {"decision": "deny"})).status == 200
        finally:
            await olive.context.close()


async def _settled(broker: Any, request_id: str) -> bool:
    return (await broker.get_or_raise(request_id)).status != Status.PENDING


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [375, 1280])
async def test_axe_finds_no_violation_on_the_people_pages(
    state_dir: Path, tmp_path: Path, browser: Browser, scheme: str, width: int
) -> None:
    """Enrolment, sign-in with a passkey, and a request that needs a step-up."""
    if not AXE.exists():
        missing = f"no {AXE.relative_to(ROOT)}: run npm ci --prefix tests/ts"
        pytest.fail(missing) if os.environ.get("CI") else pytest.skip(missing)
    size = PHONE if width == 375 else {"viewport": {"width": 1280, "height": 900}}
    found: list[str] = []
    async with people_inbox(state_dir, tmp_path) as (inbox, config, base):
        olive = await with_authenticator(browser, "olive")
        try:
            await olive.context.add_init_script(path=str(AXE))
            await olive.page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
            await olive.page.set_viewport_size(size["viewport"])

            async def check(label: str) -> None:
                found.extend(await olive.page.evaluate(AXE_RUN, f"{scheme} {width}px {label}"))

            path = await invite(state_dir, config, "olive")
            await olive.page.goto(base + path)
            await check("enrolment")
            await olive.page.goto(f"{base}/enrol/olive/not-a-token")
            await check("enrolment link not valid")
            await enrolled(olive, base, path)
            broker = await inbox.runtime.broker()
            high, _ = await broker.ask(
                AskSpec(
                    kind=Kind.APPROVAL,
                    text="Drop the table",
                    payload={"t": "orders"},
                    risk="high",
                    to=["olive"],
                )
            )
            await olive.page.goto(base + "/")
            await check("inbox, asked of you, a step-up card")
            await olive.page.goto(f"{base}/requests/{high.id}")
            await check("a request that needs a step-up")
            await olive.context.clear_cookies()
            await olive.page.goto(base + "/")
            await check("sign-in with a passkey")
        finally:
            await olive.context.close()
    assert found == []
