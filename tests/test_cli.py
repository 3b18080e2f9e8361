"""The CLI verbs that need no server: init, check, test-channel, and config errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT, server_env


def run(state_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "hitl_mcp", *args],
        env=server_env(state_dir, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_init_then_check_masks_secrets(tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "hitl.yaml"
    assert run(state_dir, "init", str(path)).returncode == 0
    assert run(state_dir, "init", str(path)).returncode == 1  # never overwrites silently
    text = path.read_text().replace("# token: ${HITL_INBOX_TOKEN}", "token: ${HITL_INBOX_TOKEN}")
    path.write_text(text)
    result = run(state_dir, "check", "--config", str(path), HITL_INBOX_TOKEN="s3cret-inbox-token")
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout and "***" in result.stdout
    assert "s3cret-inbox-token" not in result.stdout + result.stderr


def test_config_error_names_file_line_and_key(tmp_path: Path, state_dir: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server:\n  http:\n    prot: 1\n")
    for verb in (["check"], ["serve"], ["pending"]):
        result = run(state_dir, *verb, "--config", str(path))
        assert result.returncode == 2
        assert "bad.yaml:3: server.http.prot" in result.stderr
        assert "valid keys: host, port, max_body_bytes" in result.stderr


def test_test_channel_delivers_and_names_unknown_channels(state_dir: Path) -> None:
    ok = run(state_dir, "test-channel", "web", "--state-dir", str(state_dir))
    assert ok.returncode == 0, ok.stderr
    assert "web: test message delivered" in ok.stdout
    history = run(state_dir, "history", "--state-dir", str(state_dir))
    assert "Test message from hitl-mcp" in history.stdout
    bad = run(state_dir, "test-channel", "pager", "--state-dir", str(state_dir))
    assert bad.returncode == 2 and "channels: web" in bad.stderr
