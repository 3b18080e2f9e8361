"""Web Push with the inbox's real service worker, in headless Chromium.

A person signed in presses "Turn on notifications on this device" on the Devices page; the page asks
for the permission and subscribes with the server's VAPID key. Chromium here has no push service of
its own, so ``pushManager.subscribe`` hands back a subscription of the local push service
(tests/support/webpush_standin.py), which checks the VAPID JWT and decrypts what the server pushes
with that browser's keys. The decrypted push is then delivered to the service worker exactly as a
push service would (DevTools ``ServiceWorker.deliverPushMessage``); the service worker shows the
notification, and Approve is pressed on it (the service worker's own handler, run in its scope):
the agent's call returns approved, credited to the person, and the notification is replaced by the
outcome. The same button again is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from hitl_mcp.broker import AskSpec
from hitl_mcp.config import load_config
from hitl_mcp.core.models import Kind, Status
from tests.conftest import TOKEN, bearer, free_port, write_config
from tests.support.events import Changes, until
from tests.support.people import session_of
from tests.support.serve import serving
from tests.support.webpush_standin import PushStandin
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_browser import Browser, Call, expect
from tests.web.test_inbox_pages import serve_inbox

browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = shared.pytestmark

CONFIG = f"""
channels:
  web: {{type: web, token: {TOKEN}}}
  push: {{type: webpush, subject: "mailto:ops@example.com"}}
people:
  olive: {{push: true}}
"""

#: the notifications the service worker shows under a tag, once there is one (it shows them after
#: the push event's promise settles, which DevTools does not wait for). Each of these polls gives up
#: after 30 s: a CI run on a loaded 2-core box once took more than 5 s to start the worker and show.
SHOWN = """async (tag) => {
  for (let i = 0; i < 600; i++) {
    const found = await registration.getNotifications({ tag });
    if (found.length) return found.map((n) => ({ title: n.title, body: n.body,
      actions: n.actions.map((a) => a.action), tokens: n.data && n.data.tokens }));
    await new Promise((r) => setTimeout(r, 50));
  }
  return [];
}"""
#: the same, once its body starts with ``prefix``
SHOWN_AS = """async ([tag, prefix]) => {
  for (let i = 0; i < 600; i++) {
    const found = await registration.getNotifications({ tag });
    if (found.length && found[0].body.startsWith(prefix)) return { title: found[0].title, body: found[0].body,
      actions: found[0].actions.map((a) => a.action) };
    await new Promise((r) => setTimeout(r, 50));
  }
  return null;
}"""
#: until no notification of the tag is left; whether none is
GONE = """async (tag) => {
  for (let i = 0; i < 600; i++) {
    if (!(await registration.getNotifications({ tag })).length) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}"""
PRESS = """async ([tag, action]) => {
  const [n] = await registration.getNotifications({ tag });
  return answerFromNotification(n, action);
}"""


def fake_subscribe(subscription: dict[str, Any]) -> str:
    """Chromium's ``pushManager.subscribe``, answering with the local push service's subscription and
    keeping the application server key the page subscribed with."""
    return f"""
    if (self.PushManager) {{
      PushManager.prototype.subscribe = async function (options) {{
        const key = new Uint8Array(options.applicationServerKey);
        const b64 = btoa(String.fromCharCode(...key));
        localStorage.serverKey = b64.replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
        localStorage.userVisibleOnly = String(options.userVisibleOnly);
        const sub = {json.dumps(subscription)};
        return {{ endpoint: sub.endpoint, toJSON: () => sub }};
      }};
    }}
    """


async def test_turn_on_push_then_approve_from_the_notification(
    state_dir: Path, tmp_path: Path, browser: Browser
) -> None:
    stand = PushStandin()
    config = load_config(write_config(tmp_path / "hitl.yaml", free_port(), CONFIG))
    async with serving(stand.app()) as push_url, serve_inbox(state_dir, config=config) as inbox:
        stand.base = push_url
        broker = await inbox.runtime.broker()
        channel: Any = broker.channels["push"]
        subscription = stand.subscribe(channel.keys.public_key)
        port = int(inbox.url.rsplit(":", 1)[1])
        cookie = (await session_of(state_dir, "olive", port, TOKEN))["Cookie"]
        name, _, value = cookie.partition("=")
        ctx = await browser.new_context()
        try:
            await ctx.add_cookies([{"name": name, "value": value, "url": inbox.url}])
            await ctx.grant_permissions(["notifications"], origin=inbox.url)
            await ctx.add_init_script(fake_subscribe(subscription))
            page = await ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{inbox.url}/devices")
            await expect(page.locator("[data-who]")).to_have_text("olive")
            await expect(page.locator("#devices-list")).to_contain_text("None yet.")
            await page.get_by_role("button", name="Turn on notifications on this device").click()
            await expect(page.locator("#push-status")).to_have_text("Notifications are on for this device.")
            await expect(page.locator("#devices-list [data-device]")).to_have_count(1)
            await expect(page.locator("#devices-list")).to_contain_text("olive")
            assert await page.evaluate("localStorage.serverKey") == channel.keys.public_key
            assert await page.evaluate("localStorage.userVisibleOnly") == "true"

            cdp = await ctx.new_cdp_session(page)
            registrations: list[dict[str, Any]] = []
            updated = Changes()

            def registered(event: dict[str, Any]) -> None:
                registrations.extend(event["registrations"])
                updated.fire()

            cdp.on("ServiceWorker.workerRegistrationUpdated", registered)
            await cdp.send("ServiceWorker.enable")
            await until(lambda: any(not r["isDeleted"] for r in registrations), updated)
            (registration,) = {r["registrationId"] for r in registrations if not r["isDeleted"]}
            worker = (
                ctx.service_workers[0] if ctx.service_workers else await ctx.wait_for_event("serviceworker")
            )

            async def deliver(push: dict[str, Any]) -> None:
                await cdp.send(
                    "ServiceWorker.deliverPushMessage",
                    {"origin": inbox.url, "registrationId": registration, "data": json.dumps(push)},
                )

            args = {"action": "Deploy web-7 to prod", "to": ["olive"], "risk": "medium", "wait_seconds": 40}
            async with (
                Client(bearer(f"{inbox.url}/mcp"), mode="legacy") as client,
                anyio.create_task_group() as tg,
            ):
                call = Call(client, "request_approval", args)
                tg.start_soon(call.run)
                await until(lambda: len(stand.to(subscription)) >= 1, stand.changes)
                push = stand.to(subscription)[0]
                await deliver(push)
                (shown,) = await worker.evaluate(SHOWN, push["tag"])
                assert shown["title"] == "Approval needed (medium risk)"
                assert shown["body"].startswith("Deploy web-7 to prod")
                assert shown["actions"] == ["approve", "deny"]
                said = await worker.evaluate(PRESS, [push["tag"], "approve"])
                assert said == "Recorded: approved."
                result = await call.outcome()
            assert result["status"] == "answered" and result["approved"] is True, result
            request = await broker.get_or_raise(result["request_id"])
            assert (request.status, request.person, request.channel) == (Status.ANSWERED, "olive", "push")

            # settled: the outcome replaces the notification, under the same tag, with no buttons
            await until(lambda: len(stand.to(subscription)) >= 2, stand.changes)
            update = stand.to(subscription)[1]
            await deliver(update)
            replaced = await worker.evaluate(SHOWN_AS, [push["tag"], "Approved by olive"])
            assert replaced == {
                "title": "Settled: Approval needed (medium risk)",
                "body": "Approved by olive via push.\nDeploy web-7 to prod",
                "actions": [],
            }
            # the first push again (a replay): its button was used
            await deliver(push)
            await worker.evaluate(SHOWN_AS, [push["tag"], "Deploy web-7"])
            again = await worker.evaluate(PRESS, [push["tag"], "approve"])
            assert again == "Not recorded: this button was already used."

            # cancelled: the notification is withdrawn
            other, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart db-2", to=["olive"]))
            await until(lambda: len(stand.to(subscription)) >= 3, stand.changes)
            shown_push = stand.to(subscription)[2]
            await deliver(shown_push)
            assert len(await worker.evaluate(SHOWN, shown_push["tag"])) == 1
            await broker.cancel(other.id, "not needed", "agent")
            await until(lambda: len(stand.to(subscription)) >= 4, stand.changes)
            withdrawn = stand.to(subscription)[3]
            assert withdrawn == {"v": 1, "tag": f"hitl-{other.id}", "close": True}
            await deliver(withdrawn)
            assert await worker.evaluate(GONE, withdrawn["tag"]) is True
            assert errors == [], errors
        finally:
            await ctx.close()
