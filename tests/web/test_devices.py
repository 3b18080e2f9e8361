"""The inbox's Devices page and its API: a person turns Web Push on for a browser (with the CSRF
header), sees only their own devices (the operator sees everyone's), and turns one off; a subscription
that is not one is refused in words; without a webpush channel there is nothing to turn on."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.channels.webpush.devices import DEVICE
from hitl_mcp.config import parse_config
from tests.conftest import TOKEN, running
from tests.support.webpush_standin import PushStandin
from tests.web.test_inbox_pages import browser_like

pytestmark = pytest.mark.anyio

CONFIG = f"""
channels:
  web: {{type: web, token: {TOKEN}}}
  push: {{type: webpush}}
people:
  olive: {{push: true}}
  lead: {{push: true}}
"""


async def test_a_person_turns_push_on_sees_their_own_devices_and_turns_one_off(state_dir: Path) -> None:
    stand = PushStandin(base="https://push.example")
    async with running(state_dir, parse_config(CONFIG, source="t.yaml")) as rt:
        async with browser_like(rt, person="olive") as olive, browser_like(rt, person="lead") as lead:
            key = (await olive.get("/webpush/key")).json()["public_key"]
            for web in (olive, lead):
                saved = await web.post(
                    "/webpush/devices", json={"subscription": stand.subscribe(key), "label": "Android"}
                )
                assert saved.status_code == 200, saved.text
            mine = (await olive.get("/devices", headers={"Accept": "application/json"})).json()["devices"]
            assert [(d["holder"], d["label"], d["service"]) for d in mine] == [
                ("olive", "Android", "push.example")
            ]
            page = await olive.get("/devices")
            assert page.status_code == 200 and "Turn on notifications on this device" in page.text
            assert 'href="/devices" aria-current="page"' in page.text  # the top bar's link
            assert (
                f'data-device="{mine[0]["id"]}"' in page.text
                and "lead" not in page.text.split("devices-list")[1]
            )
            # lead cannot turn olive's off; olive can
            theirs = await lead.post(
                f"/devices/{mine[0]['id']}/remove", headers={"Accept": "application/json"}
            )
            assert theirs.status_code == 404
            gone = await olive.post(
                f"/devices/{mine[0]['id']}/remove", headers={"Accept": "application/json"}
            )
            assert gone.status_code == 200
            broker = await rt.broker()
            rows = await broker.store.credentials(DEVICE)
            assert sorted((r.data["person"], r.revoked_by) for r in rows) == [
                ("lead", None),
                ("olive", "olive"),
            ]
        async with browser_like(rt) as operator:
            every = (await operator.get("/devices", headers={"Accept": "application/json"})).json()["devices"]
            assert [d["holder"] for d in every] == ["lead"]


async def test_what_is_not_a_subscription_is_refused_in_words(state_dir: Path) -> None:
    async with running(state_dir, parse_config(CONFIG, source="t.yaml")) as rt:
        async with browser_like(rt, person="olive") as olive:
            bad = {"endpoint": "https://push.example/x", "keys": {"p256dh": "AAAA", "auth": "AAAA"}}
            r = await olive.post("/webpush/devices", json={"subscription": bad})
            assert (
                r.status_code == 400
                and r.json()["error"] == "The subscription's p256dh key is not a P-256 public key."
            )
            r = await olive.post(
                "/webpush/devices", content=b"{", headers={"Content-Type": "application/json"}
            )
            assert r.status_code == 400
            del olive.headers["X-CSRF-Token"]
            r = await olive.post("/webpush/devices", json={"subscription": bad})
            assert r.status_code == 401


async def test_without_a_webpush_channel_there_is_nothing_to_turn_on(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        assert (await web.get("/webpush/key")).status_code == 404
        page = await web.get("/devices")
        assert page.status_code == 200 and "Web Push is not configured" in page.text
        assert 'href="/devices"' not in page.text  # no link to it in the top bar
