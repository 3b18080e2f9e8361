"""What a newcomer's mistakes print: one line each, never a traceback. A channel whose library is not
installed, a config with unset variables, a folder that does not exist yet, an SMTP server that
never answers, a channel that fails its test, a server started by hand on a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from tests.conftest import PYTHON, ROOT, free_port, server_env
from tests.support.mail import silent_server

#: a ``sitecustomize`` that makes the modules named in $HIDE_MODULES look not installed, the way
#: Python itself spells it: ``import twilio`` fails and ``importlib.util.find_spec`` finds nothing
HIDER = """
import os, sys
for name in os.environ.get("HIDE_MODULES", "").split(","):
    if name:
        sys.modules[name] = None
"""

SMS = """
channels:
  web: {type: web}
  phone:
    type: twilio_sms
    account_sid: AC00000000000000000000000000000000
    auth_token: not-a-real-token
    from: "+15550001111"
    to: ["+15550002222"]
"""
SLACK = """
channels:
  web: {type: web}
  team: {type: slack, bot_token: xoxb-not-real, app_token: xapp-not-real, channel: C0123ABCD,
         allowed_users: [U0123ABCD]}
"""
EMAIL = """
channels:
  web: {{type: web}}
  mail:
    type: email
    smtp: {{host: 127.0.0.1, port: {port}, starttls: false}}
    from: hitl@example.com
    to: [person@example.com]
"""


def run(state_dir: Path, *args: str, hide: str = "", stdin: int | None = subprocess.DEVNULL, **env: str):
    extra = dict(env)
    if hide:
        hider = state_dir.parent / "hider"
        hider.mkdir(exist_ok=True)
        (hider / "sitecustomize.py").write_text(HIDER)
        extra["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hider), os.environ.get("PYTHONPATH")]))
        extra["HIDE_MODULES"] = hide
    return subprocess.run(
        [PYTHON, "-m", "hitl_mcp", *args],
        env=server_env(state_dir, **extra),  # $HITL_STATE_DIR
        cwd=ROOT,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.mark.parametrize(
    ("config", "hide", "line"),
    [
        (
            SMS,
            "twilio",
            "hitl-mcp: channel 'phone' (type twilio_sms) needs twilio, which is not installed: "
            "pip install 'mcp-hitl[sms]'",
        ),
        (
            SLACK,
            "slack_sdk,aiohttp",
            "hitl-mcp: channel 'team' (type slack) needs slack_sdk and aiohttp, which are not installed: "
            "pip install 'mcp-hitl[slack]'",
        ),
        (
            EMAIL.format(port=2525),
            "aiosmtplib",
            "hitl-mcp: channel 'mail' (type email) needs aiosmtplib, which is not installed: "
            "pip install 'mcp-hitl[email]'",
        ),
    ],
    ids=["sms", "slack", "email"],
)
def test_a_channel_without_its_library_is_refused_at_start_in_one_line(
    tmp_path: Path, state_dir: Path, config: str, hide: str, line: str
) -> None:
    """Not a 90-line traceback (SMS, Slack), nor a server that starts and then fails every delivery
    while telling the model "sent via email": serve, check and test-channel refuse before anything."""
    path = tmp_path / "hitl.yaml"
    path.write_text(f"server:\n  http: {{port: {free_port()}}}\n{config}")
    channel = line.split("'")[1]
    for verb in (["serve"], ["serve", "--transport", "http"], ["check"], ["test-channel", channel]):
        result = run(state_dir, *verb, "--config", str(path), hide=hide)
        assert result.returncode == 2, (verb, result.stderr)
        assert result.stderr.splitlines() == [line], verb
        assert "inbox at" not in result.stderr and result.stdout == ""


def test_every_unset_variable_is_reported_at_once(tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "hitl.yaml"
    path.write_text(
        SMS.replace("AC00000000000000000000000000000000", "${TWILIO_ACCOUNT_SID}")
        .replace("not-a-real-token", "${TWILIO_AUTH_TOKEN}")
        .replace('"+15550001111"', '"${TWILIO_FROM}"')
    )
    for verb in ("check", "serve"):
        result = run(state_dir, verb, "--config", str(path))
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            f"hitl-mcp: config error: {path}:6: channels.phone.account_sid: environment variable "
            "TWILIO_ACCOUNT_SID is not set (write ${TWILIO_ACCOUNT_SID:-default} to give a default)",
            f"hitl-mcp: config error: {path}:7: channels.phone.auth_token: environment variable "
            "TWILIO_AUTH_TOKEN is not set (write ${TWILIO_AUTH_TOKEN:-default} to give a default)",
            f"hitl-mcp: config error: {path}:8: channels.phone.from: environment variable "
            "TWILIO_FROM is not set (write ${TWILIO_FROM:-default} to give a default)",
        ]


def test_init_creates_missing_folders(tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "new" / "deeper" / "hitl.yaml"
    result = run(state_dir, "init", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {path}; check it with: hitl-mcp check --config {path}\n"
    assert run(state_dir, "check", "--config", str(path)).returncode == 0
    (tmp_path / "file").write_text("")
    under_a_file = tmp_path / "file" / "hitl.yaml"
    failed = run(state_dir, "init", str(under_a_file))
    assert failed.returncode == 1
    blocker = tmp_path / "file"
    assert failed.stderr == f"hitl-mcp: cannot write {under_a_file}: {blocker} is a file, not a folder\n"


@pytest.mark.anyio
async def test_check_names_an_smtp_server_that_never_answers(tmp_path: Path, state_dir: Path) -> None:
    """The server accepts and says nothing: the channel's own limit (its ``timeout``, 2 s here rather
    than the default 20 s, to keep the test short) is reached first, so the reason is said (not the
    empty str() of the CLI's TimeoutError)."""
    async with silent_server() as port:
        path = tmp_path / "hitl.yaml"
        path.write_text(EMAIL.format(port=port).replace("starttls: false}", "starttls: false, timeout: 2}"))
        started = time.monotonic()
        result = await anyio.to_thread.run_sync(lambda: run(state_dir, "check", "--config", str(path)))
    assert 1.9 < time.monotonic() - started < 60
    assert result.returncode == 1, result.stderr
    assert f"# channel mail: FAILED: SMTP 127.0.0.1:{port} did not answer within 2 s\n" in result.stdout


def test_test_channel_says_each_failure_once(tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "hitl.yaml"
    closed = free_port()  # nothing listens there
    path.write_text(EMAIL.format(port=closed))
    result = run(state_dir, "test-channel", "mail", "--config", str(path))
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"hitl-mcp: mail: not delivered: could not reach SMTP 127.0.0.1:{closed}: "), line


def test_serve_on_a_terminal_says_it_waits_for_a_host(tmp_path: Path, state_dir: Path) -> None:
    """Started by hand (stdin is a terminal), the stdio server says what it is waiting for and how
    to run it standalone; started by a host (stdin a pipe) it says nothing of the kind."""
    path = tmp_path / "hitl.yaml"
    path.write_text(f"server:\n  http: {{port: {free_port()}}}\n")
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [PYTHON, "-m", "hitl_mcp", "serve", "--config", str(path)],
        env=server_env(state_dir),
        cwd=ROOT,
        stdin=secondary,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(secondary)
    try:
        assert process.stderr is not None
        ready, _, _ = select.select([process.stderr], [], [], 30)
        assert ready
        first = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.close(primary)
    assert first == (
        "hitl-mcp: waiting for an MCP host on stdin (the stdio transport: a host such as Claude starts it). "
        "To run it standalone: hitl-mcp serve --transport http, then hitl-mcp inbox --open. "
        "Ctrl-C or Ctrl-D ends it.\n"
    )
    piped = subprocess.run(
        [PYTHON, "-m", "hitl_mcp", "serve", "--config", str(path)],
        env=server_env(state_dir),
        cwd=ROOT,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "waiting for an MCP host" not in piped.stderr


def test_a_library_that_is_there_but_will_not_import_is_one_line_too(tmp_path: Path, state_dir: Path) -> None:
    """A broken install (found, yet its import fails) stops serve in one line naming the extra."""
    broken = tmp_path / "broken"
    (broken / "twilio").mkdir(parents=True)
    (broken / "twilio" / "__init__.py").write_text(
        "raise ImportError('twilio is broken here', name='twilio')\n"
    )
    path = tmp_path / "hitl.yaml"
    path.write_text(f"server:\n  http: {{port: {free_port()}}}\n{SMS}")
    pythonpath = os.pathsep.join(filter(None, [str(broken), os.environ.get("PYTHONPATH")]))
    line = (
        "hitl-mcp: channel 'phone' (type twilio_sms) cannot load twilio (twilio is broken here): "
        "pip install 'mcp-hitl[sms]'"
    )
    result = run(state_dir, "serve", "--transport", "http", "--config", str(path), PYTHONPATH=pythonpath)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.splitlines()[-1] == line
