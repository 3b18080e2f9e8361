"""The CLI verbs that need no server: init, check, test-channel; config errors, and a state directory
or database that cannot be used."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

from tests.conftest import PYTHON, ROOT, free_port, serve_args, server_env, write_config


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
    text = path.read_text().replace("# token: ${HITL_WEB_TOKEN}", "token: ${HITL_WEB_TOKEN}")
    path.write_text(text)
    result = run(state_dir, "check", "--config", str(path), HITL_WEB_TOKEN="s3cret-inbox-token")
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


def _read_only(state_dir: Path, args: list[str]) -> list[str]:
    """The command run with ``state_dir`` read-only: for root (which writes through permissions) a
    read-only bind mount of it in a mount namespace of its own, else mode 0500."""
    command = [PYTHON, "-m", "hitl_mcp", *args]
    if os.geteuid() == 0:
        mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
        return ["unshare", "--mount", "sh", "-c", mount, str(state_dir), *command]
    os.chmod(state_dir, 0o500)
    return command


def test_verbs_on_a_read_only_state_dir_say_so_in_one_line(state_dir: Path) -> None:
    assert run(state_dir, "test-channel", "web").returncode == 0  # a database to find
    verbs = [
        ["pending"],
        ["history"],
        ["answer", "0123456789abcdef", "yes"],
        ["approve", "0123456789abcdef"],
        ["deny", "0123456789abcdef"],
        ["audit", "verify"],
        ["audit", "head"],
        ["test-channel", "web"],
    ]
    try:
        for verb in verbs:
            result = subprocess.run(
                _read_only(state_dir, [*verb, "--state-dir", str(state_dir)]),
                env=server_env(state_dir),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 1, (verb, result.stderr)
            assert result.stderr.splitlines() == [
                f"hitl-mcp: cannot use the database at {state_dir / 'hitl.sqlite3'}: unable to open database"
                f" file (the state directory {state_dir} is read-only)"
            ], (verb, result.stderr)
    finally:
        os.chmod(state_dir, 0o700)


def test_a_state_dir_under_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    state_dir = tmp_path / "file" / "state"
    result = run(state_dir, "pending", "--state-dir", str(state_dir))
    assert result.returncode == 1
    assert result.stderr == f"hitl-mcp: cannot use {state_dir}: Not a directory\n"


def test_a_damaged_database_is_refused_before_anything_is_announced(tmp_path: Path, state_dir: Path) -> None:
    assert run(state_dir, "test-channel", "web").returncode == 0
    db = state_dir / "hitl.sqlite3"
    assert not (state_dir / "hitl.sqlite3-wal").exists()  # all of it is in the file
    size = db.stat().st_size
    assert size > 4 * 4096
    with db.open("r+b") as fh:  # the header page stays: the file still opens as a database
        fh.seek(4096)
        fh.write(random.Random(7).randbytes(size - 4096))
    damaged = f"hitl-mcp: the database at {db} is damaged: "

    config = write_config(tmp_path / "hitl.yaml", free_port())
    for transport in ("http", "stdio"):
        result = subprocess.run(
            [PYTHON, *serve_args(config, "--transport", transport)],
            env=server_env(state_dir),
            cwd=ROOT,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.splitlines()  # one line, and no "inbox at": nothing was announced
        assert line.startswith(damaged) and result.stdout == ""

    check = run(state_dir, "check")
    assert check.returncode == 1
    (line,) = check.stderr.splitlines()
    assert line.startswith(damaged)
    for verb in (["pending"], ["audit", "verify"]):
        result = run(state_dir, *verb)
        assert result.returncode == 1
        (line,) = result.stderr.splitlines()
        assert line.startswith(damaged), result.stderr

    db.unlink()  # no database yet is no damage
    fine = run(state_dir, "check")
    assert fine.returncode == 0 and f"# database {db}: none yet" in fine.stdout
