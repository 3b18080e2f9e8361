"""One request-state key on every replica (state_key.py): ``server.request_state_key`` or
``$HITL_REQUEST_STATE_KEY``, else the key file. A 2026-07-28 retry sealed by one server is opened by
another with its own state directory when both have the key, and refused when they do not."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp import types as mcp_types

from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.kit.state_key import ENV, STATE_KEY_FILE, BadStateKey, request_state_keys
from hitl_mcp.mcp.host_forms import FORM_KEY
from hitl_mcp.runtime import ConfigRefused, Runtime
from tests.conftest import TOKEN, cli, free_port, running, write_config
from tests.mcp.test_elicitation import Host, accept

pytestmark = pytest.mark.anyio

KEY = secrets.token_hex(32)
OTHER = secrets.token_hex(32)
ARGS = {"question": "Colour?", "choices": ["red", "blue"], "wait_seconds": 5}


def keyed(key: str | None) -> Any:
    line = f"server: {{request_state_key: {key}}}\n" if key else ""
    return parse_config(
        f"""{line}
defaults: {{heartbeat_seconds: 1}}
channels:
  web: {{type: web, token: {TOKEN}}}
  elicitation: {{type: elicitation}}
""",
        source="test.yaml",
    )


async def sealed_on(state_dir: Path, key: str | None) -> str:
    """The sealed ``request_state`` of the host form one server hands out."""
    async with (
        running(state_dir, keyed(key)) as rt,
        Client(rt.build_mcp(), mode="auto", elicitation_callback=Host()) as client,
    ):
        first = await client.session.call_tool("ask_user", ARGS, allow_input_required=True)
    assert isinstance(first, mcp_types.InputRequiredResult) and first.request_state
    return first.request_state


async def retried_on(state_dir: Path, key: str | None, state: str) -> Any:
    """The retry carrying that state and the form's answer, to another server: its result, or the
    error it was refused with."""
    async with (
        running(state_dir, keyed(key)) as rt,
        Client(rt.build_mcp(), mode="auto", elicitation_callback=Host()) as client,
    ):
        answer = {FORM_KEY: accept(choice="red")}
        try:
            return await client.session.call_tool(
                "ask_user", ARGS, input_responses=answer, request_state=state, allow_input_required=True
            )
        except MCPError as exc:
            return exc


async def test_servers_sharing_the_configured_key_open_each_others_state(tmp_path: Path) -> None:
    one, two, three = (tmp_path / name for name in ("one", "two", "three"))
    for folder in (one, two, three):
        folder.mkdir()
    state = await sealed_on(one, KEY)
    assert not (one / STATE_KEY_FILE).exists()  # the configured key, not a file of its own
    # another state directory, the same key: the state opens (this server has no such request in its
    # own database, so it answers with a form of its own rather than refusing)
    opened = await retried_on(two, KEY, state)
    assert isinstance(opened, mcp_types.InputRequiredResult)
    # another key: refused, as between two servers that share nothing
    refused = await retried_on(three, OTHER, state)
    assert isinstance(refused, MCPError) and "Invalid or expired requestState" in str(refused)


def test_config_then_environment_then_the_file(tmp_path: Path) -> None:
    assert request_state_keys(tmp_path, KEY, {ENV: OTHER}) == [KEY.encode()]
    assert request_state_keys(tmp_path, None, {ENV: OTHER}) == [OTHER.encode()]
    assert not (tmp_path / STATE_KEY_FILE).exists()
    from_file = request_state_keys(tmp_path, None, {})
    assert from_file == [(tmp_path / STATE_KEY_FILE).read_text().strip().encode()]
    # the file's content is a key: copied into the environment, it seals alike
    assert request_state_keys(tmp_path / "elsewhere", None, {ENV: from_file[0].decode()}) == from_file
    # a rotation ring: the first seals, both open; upper case is the same key
    ring = request_state_keys(tmp_path, f"{KEY.upper()}, {OTHER}", {})
    assert ring == [KEY.encode(), OTHER.encode()]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0123abcd9", "too short \\(9 characters\\)"),
        ("z" * 64, "hexadecimal characters only"),
        (f"{KEY},", "key 2 of 2: expected hexadecimal characters only"),
        (f"{KEY},{KEY}", "listed twice"),
    ],
    # ids that are the same in every process (pytest-xdist compares them): KEY is random
    ids=["short", "not-hex", "empty-second", "twice"],
)
def test_a_bad_key_is_refused_without_showing_it(tmp_path: Path, value: str, says: str) -> None:
    with pytest.raises(BadStateKey, match=says) as caught:
        request_state_keys(tmp_path, None, {ENV: value})
    assert str(caught.value).startswith(f"${ENV}: ") and value not in str(caught.value)
    with pytest.raises(ConfigError, match=says) as refused:
        parse_config(f"server: {{request_state_key: '{value}'}}\n", source="test.yaml")
    assert value not in str(refused.value) and "test.yaml:1" in str(refused.value)


def test_a_bad_key_in_the_environment_refuses_to_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "not-a-key")
    with pytest.raises(ConfigRefused, match=f"\\${ENV}: expected hexadecimal") as refused:
        Runtime(keyed(None), tmp_path).build_mcp()
    assert "not-a-key" not in str(refused.value)


async def test_serve_says_what_is_wrong_in_one_line(tmp_path: Path, state_dir: Path) -> None:
    config = write_config(tmp_path / "hitl.yaml", free_port())
    code, _, err = await cli(state_dir, "serve", "--config", str(config), **{ENV: "0123"})
    assert code != 0 and "too short (4 characters)" in err and "Traceback" not in err
    assert "0123" not in err.replace("(4 characters)", "")


def test_the_key_is_masked_in_the_effective_config() -> None:
    from hitl_mcp.config import effective_config

    shown = effective_config(keyed(KEY))
    assert shown["server"]["request_state_key"] == "***"
