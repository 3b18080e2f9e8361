"""Two ``hitl-mcp serve`` processes on one store: each escalation step runs exactly once, whichever
process gets to it, and its send goes out once. The channel is the real ntfy channel against the local
ntfy stand-in (tests/support/ntfy_standin.py), which counts what is published."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from mcp.client import Client

from tests.conftest import bearer, cli, free_port, sc, serve_args, server_env, server_process, write_config
from tests.support.events import until
from tests.support.ntfy_standin import NtfyStandin
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

TOPIC = "hitl-escalation-Zq3vK8pW1xY7rT2mN"
ASKED = 6


def ladder(ntfy: str) -> str:
    return f"""
channels:
  web: {{type: web}}
  push: {{type: ntfy, server: "{ntfy}", topic: {TOPIC}}}
escalation:
  default:
    steps:
      - {{after: 0s, notify: [push]}}
      - {{after: 1s, remind: true}}
"""


async def test_two_processes_run_each_step_once(tmp_path: Path, state_dir: Path) -> None:
    stand = NtfyStandin()
    async with serving(stand.app()) as ntfy:
        port_a, port_b = free_port(), free_port()
        config_a = write_config(tmp_path / "a.yaml", port_a, ladder(ntfy))
        config_b = write_config(tmp_path / "b.yaml", port_b, ladder(ntfy))
        env = server_env(state_dir)
        async with (
            server_process(serve_args(config_a, "--transport", "http"), env),
            server_process(serve_args(config_b, "--transport", "http"), env),
        ):
            async with Client(bearer(f"http://127.0.0.1:{port_a}/mcp"), mode="legacy") as client:
                ids = [
                    sc(await client.call_tool("ask_user", {"question": f"Q{i}?", "wait_seconds": 0}))[
                        "request_id"
                    ]
                    for i in range(ASKED)
                ]

            def published() -> dict[str, int]:
                counts = dict.fromkeys(ids, 0)
                for message in stand.published(TOPIC):
                    if message.get("sequence_id") in counts:
                        counts[message["sequence_id"]] += 1
                return counts

            # the request, then its reminder (an update of the same notification), on every request
            await until(lambda: all(n >= 2 for n in published().values()), stand.changes, seconds=30)
        # both processes are gone: nothing more can be sent
        assert published() == dict.fromkeys(ids, 2)

    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    ran = db.execute(
        "SELECT request_id, json_extract(data, '$.step'), COUNT(*) FROM audit WHERE event = 'step_sent'"
        " GROUP BY request_id, json_extract(data, '$.step')"
    ).fetchall()
    assert sorted(ran) == sorted((rid, step, 1) for rid in ids for step in (1, 2))
    reminded = db.execute(
        "SELECT request_id, json_extract(data, '$.channel') FROM audit WHERE event = 'reminded'"
    ).fetchall()
    assert sorted(reminded) == sorted((rid, channel) for rid in ids for channel in ("push", "web"))
    statuses = db.execute("SELECT DISTINCT status FROM steps").fetchall()
    assert statuses == [("done",)]
    db.close()

    code, out, err = await cli(state_dir, "show", ids[0])
    assert code == 0, err
    trail = [line for line in out.splitlines() if "step_sent" in line or "reminded" in line]
    assert len(trail) == 4, out  # two steps, and a reminder on each channel the request was sent on
    assert json.dumps({"action": "remind", "channels": ["push", "web"], "step": 2}) in out
