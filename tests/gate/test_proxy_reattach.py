"""One approval, one forward, across proxy processes: a host that restarts the proxy and repeats a
call waits for the approval it already asked for, and an approval forwards exactly one call. The
pending error names the inbox. And the proxy's command line: ``--policy``, ``--config``, ``--port``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli, free_port, text_of
from tests.gate.test_proxy import MARKER, Gate, answered_call, connected

pytestmark = pytest.mark.anyio

#: the SDK client's name is ``mcp``: its calls return "still waiting" after 3 s
SHORT = "hosts:\n  mcp: {budget_seconds: 3}\n"


async def test_two_proxy_processes_one_after_the_other_one_approval_one_forward(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n", SHORT)
    async with connected(gate.params(MARKER)) as first:
        waited = await first.call_tool("touch", {"name": "db"}, progress_callback=gate.on_progress)
        asked = await gate.waiting_request()
    # the host gave up, and restarts the proxy (a new process, nothing in memory): the same call
    assert waited.is_error and "still waiting for approval of touch" in text_of(waited)
    assert f"http://127.0.0.1:{gate.port}/requests/{asked}" in text_of(waited)  # where to answer
    async with connected(gate.params(MARKER)) as second:
        result, reattached = await answered_call(gate, second, "touch", {"name": "db"}, "approve")
        assert reattached == asked and not result.is_error, text_of(result)
        # the approval is used: the same call again is a new question
        gate.progress.clear()
        again = await second.call_tool("touch", {"name": "db"}, progress_callback=gate.on_progress)
        fresh = await gate.waiting_request()
    assert again.is_error and fresh != asked
    assert gate.marks() == ["db plain"]


async def test_an_approval_given_while_no_proxy_waited_forwards_the_next_same_call_once(
    tmp_path: Path,
) -> None:
    gate = Gate(tmp_path, "default: ask\n", SHORT)
    async with connected(gate.params(MARKER)) as first:
        waited = await first.call_tool("touch", {"name": "db"}, progress_callback=gate.on_progress)
    asked = await gate.waiting_request()
    assert waited.is_error and gate.marks() == []
    code, _, err = await cli(gate.state_dir, "approve", asked, "--config", str(gate.config))
    assert code == 0, err
    async with connected(gate.params(MARKER)) as second:
        gate.progress.clear()
        forwarded = await second.call_tool("touch", {"name": "db"}, progress_callback=gate.on_progress)
        assert not forwarded.is_error, text_of(forwarded)
        assert gate.progress == []  # nobody was asked again
        other = await second.call_tool("touch", {"name": "other"}, progress_callback=gate.on_progress)
        assert other.is_error and "still waiting" in text_of(other)  # approved was db, not other
        again = await second.call_tool("touch", {"name": "db"}, progress_callback=gate.on_progress)
        assert again.is_error and "still waiting" in text_of(again)
    assert gate.marks() == ["db plain"]
    audit = (await cli(gate.state_dir, "show", asked, "--json", "--config", str(gate.config)))[1]
    assert audit.count('"forwarded"') == 1


async def test_policy_config_and_port_on_the_command_line(tmp_path: Path) -> None:
    broken = "rules:\n  - tools: [touch]\n    action: maybe\n"
    gate = Gate(tmp_path, broken)
    # the older spelling: --config is the policy file, for one more release, with a warning
    code, _, err = await cli(gate.state_dir, "proxy", "--config", str(gate.policy), "--", "true")
    assert code == 2 and f"{gate.policy}:3: rules[0].action" in err
    assert f"use `--policy {gate.policy}`" in err
    code, _, err = await cli(
        gate.state_dir, "proxy", "--policy", str(gate.policy), "--config", str(gate.config), "--", "true"
    )
    assert code == 2 and f"{gate.policy}:3: rules[0].action" in err and "warning" not in err
    twice = ["--config", str(gate.config), "--server-config", str(gate.config)]
    code, _, err = await cli(gate.state_dir, "proxy", "--policy", str(gate.policy), *twice, "--", "true")
    assert code == 1 and "name the server's config once" in err
    code, _, err = await cli(gate.state_dir, "proxy", "--", "true")
    assert code == 1 and "name the policy file: --policy gate.yaml" in err
    port = ["--port", "70000", "--", "true"]
    code, _, err = await cli(gate.state_dir, "proxy", "--policy", str(gate.policy), *port)
    assert code == 1 and "--port must be a port number from 1 to 65535" in err

    gate.policy.write_text("default: ask\n")
    port = free_port()  # not the config's: --port wins, and the inbox and API listen there
    async with connected(gate.params(MARKER, None, "--port", str(port))) as client:
        gate.port = port
        result, request_id = await answered_call(gate, client, "touch", {"name": "p"}, "approve")
    assert not result.is_error and request_id
