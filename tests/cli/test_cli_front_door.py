"""What a newcomer trips on at the terminal (issue #39): a listing piped into ``head``, a short id, a
verb group typed alone, ``delegate`` without the config that names people, and ``check`` and ``show``
writing times and durations the way a person (and a config) writes them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.conftest import PYTHON, ROOT, api_client, cli, running, sc, server_env

pytestmark = pytest.mark.anyio

FLOAT_SECONDS = re.compile(r"\b\d{4,}\.\d+\b")  # 86400.0, 1796439437.44...


def run_into_closed_pipe(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``hitl-mcp <args>`` with its stdout a pipe whose reader has gone (``| head -1`` after the
    first line): every write to it fails, whatever the timing."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [PYTHON, "-m", "hitl_mcp", *args, "--state-dir", str(state_dir)],
            stdout=write,
            stderr=subprocess.PIPE,
            env=server_env(state_dir),
            cwd=ROOT,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)


async def test_a_listing_into_a_closed_pipe_is_no_failure(state_dir: Path) -> None:
    """``hitl-mcp history | head -1`` said "the state directory failed: [Errno 32] Broken pipe" and
    exited 1: the reader stopping is not a database failure. Every verb that prints is quiet, exit 0."""
    async with running(state_dir) as rt, Client(rt.build_mcp()) as client:
        for n in range(3):
            sc(await client.call_tool("notify_user", {"message": f"note {n}"}))
        asked = sc(await client.call_tool("ask_user", {"question": "Which region?", "wait_seconds": 0}))
    listings = [
        ["history"],
        ["pending"],
        ["pending", "--json"],
        ["show", asked["request_id"]],
        ["rules", "list"],
        ["agent", "list"],
        ["delegate", "--list"],
        ["audit", "head"],
        ["check"],
    ]
    for args in listings:
        done = await anyio.to_thread.run_sync(lambda args=args: run_into_closed_pipe(state_dir, *args))
        assert (done.returncode, done.stderr) == (0, ""), args


async def test_a_short_id_says_how_long_a_start_must_be(state_dir: Path) -> None:
    for verb in (["show", "8"], ["answer", "8f", "yes"], ["approve", "8f3"]):
        code, _, err = await cli(state_dir, *verb)
        assert code == 1
        assert err == (
            f"hitl-mcp: no request has the id {verb[1]!r}: give the whole id, or its first 4 characters "
            "or more\n"
        )


async def test_delegate_without_a_config_says_where_people_come_from(state_dir: Path) -> None:
    code, _, err = await cli(state_dir, "delegate", "owner", "backup", "--until", "2099-01-01")
    assert code == 1
    assert "unknown person 'owner'" in err and "--config" in err
    assert err.count("\n") == 1


async def test_a_verb_group_typed_alone(state_dir: Path) -> None:
    """``rules`` and ``agent`` alone list, as ``rules list`` and ``agent list`` do; ``audit`` alone
    names its two verbs in one line. None prints argparse's usage."""
    for group in ("rules", "agent"):
        alone, listed = await cli(state_dir, group), await cli(state_dir, group, "list")
        assert alone == listed and alone[0] == 0, alone
    code, out, err = await cli(state_dir, "audit")
    assert (code, out) == (2, "") and "usage:" not in err and err.count("\n") == 1
    assert "hitl-mcp audit verify" in err and "hitl-mcp audit head" in err


async def test_check_writes_durations_and_moments_as_a_config_does(tmp_path: Path, state_dir: Path) -> None:
    config = tmp_path / "hitl.yaml"
    config.write_text(
        "people:\n  owner: {web: owner}\n  backup: {web: backup}\n"
        "delegations:\n  - {from: owner, to: backup, from_time: 2026-12-20, until: 2027-01-04}\n"
    )
    code, out, err = await cli(state_dir, "check", "--config", str(config))
    assert code == 0, err
    assert not FLOAT_SECONDS.findall(out), FLOAT_SECONDS.findall(out)
    assert "    timeout: 1d\n" in out and "    timeout: 1h\n" in out  # a question's and an approval's
    assert "  heartbeat_seconds: 10s\n" in out and "    session_ttl: 12h\n" in out
    assert "  from_time: '2026-12-20T00:00:00.000Z'\n" in out
    assert "  until: '2027-01-04T00:00:00.000Z'\n" in out


async def test_the_trail_of_an_expired_request(state_dir: Path) -> None:
    """``show`` and the inbox page: every time in ISO (the created row's ``expires_at`` was epoch
    seconds), and an expiry is "expired", not "expired by expiry"."""
    async with running(state_dir) as rt, Client(rt.build_mcp()) as client:
        out = sc(
            await client.call_tool(
                "ask_user", {"question": "Which region?", "timeout_seconds": 1, "wait_seconds": 5}
            )
        )
        assert out["status"] == "expired"
        async with api_client(rt) as http:
            page = (await http.get(f"/requests/{out['request_id']}")).text
    code, shown, err = await cli(state_dir, "show", out["request_id"])
    assert code == 0, err
    trail = shown.split("\ntrail\n", 1)[1]
    assert not FLOAT_SECONDS.findall(trail), trail
    assert re.search(r'"expires_at": "\d{4}-\d\d-\d\dT[\d:.]+Z"', trail), trail
    assert re.search(r"Z  expired\n", trail) and "by expiry" not in trail, trail
    assert "by expiry" not in page and "<strong>expired</strong>" in page
    assert not FLOAT_SECONDS.findall(re.sub(r"<[^>]+>", "", page.split("<strong>created</strong>")[1])[:300])
