"""``hitl-mcp people devices``: the browsers where a person (or the operator) turned Web Push on,
listed without their endpoints or keys, and turned off one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hitl_mcp.channels import webpush
from hitl_mcp.channels.webpush.devices import parse_subscription
from hitl_mcp.store.select import DB_FILE
from hitl_mcp.web.devices import turn_on
from tests.conftest import TOKEN, cli, free_port, write_config
from tests.support.harness import channel_broker
from tests.support.webpush_standin import PushStandin

pytestmark = pytest.mark.anyio

CONFIG = f"""
channels:
  web: {{type: web, token: {TOKEN}}}
  push: {{type: webpush}}
people:
  olive: {{push: true}}
"""


async def test_people_devices_lists_and_removes(state_dir: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "hitl.yaml", free_port(), CONFIG)
    stand = PushStandin(base="https://push.example")
    cfg = webpush.Config(type="webpush")
    async with channel_broker(
        state_dir, lambda hub: webpush.Channel("push", cfg, hub), db=state_dir / DB_FILE, start=False
    ) as broker:
        channel = broker.channels["push"]
        assert isinstance(channel, webpush.Channel)
        for person in ("olive", None):
            sub = stand.subscribe(channel.keys.public_key)
            await turn_on(broker, parse_subscription(sub, person, "Linux"), person or "operator")
        (olive,) = [d for d in await channel.devices() if d.person == "olive"]

    code, out, err = await cli(state_dir, "people", "devices", "olive", "--config", str(config))
    assert code == 0, err
    (line,) = out.splitlines()
    assert line.startswith(olive.id) and "Linux" in line and "push.example" in line
    assert "https://" not in out and olive.p256dh not in out
    code, out, _ = await cli(state_dir, "people", "devices", "operator", "--json", "--config", str(config))
    (listed,) = json.loads(out)
    assert listed["holder"] == "operator" and set(listed) == {
        "id",
        "holder",
        "label",
        "service",
        "created_at",
    }

    code, out, err = await cli(
        state_dir, "people", "devices", "olive", "--remove", olive.id, "--config", str(config)
    )
    assert code == 0 and out.startswith(f"turned off olive's device {olive.id}"), err
    code, out, _ = await cli(state_dir, "people", "devices", "olive", "--config", str(config))
    assert out.startswith("olive has no device with push on")
    code, out, err = await cli(
        state_dir, "people", "devices", "olive", "--remove", olive.id, "--config", str(config)
    )
    assert code != 0 and err.count("\n") == 1 and f"olive has no device '{olive.id}'" in err, err
    code, _, err = await cli(state_dir, "people", "devices", "nobody", "--config", str(config))
    assert code != 0 and err.count("\n") == 1 and "no person 'nobody'" in err, err
