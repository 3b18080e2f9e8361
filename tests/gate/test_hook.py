"""``hitl-mcp hook <host>`` against a real running server: the hosts' documented event shapes
(``tests/hook_events/``) on stdin, the answer given through the server's JSON API, and the printed
decision checked against the shape each host documents."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.conftest import (
    PYTHON,
    ROOT,
    TOKEN,
    free_port,
    serve_args,
    server_env,
    server_process,
    write_config,
)
from tests.support.events import Changes, until

pytestmark = pytest.mark.anyio

EVENTS = ROOT / "tests" / "hook_events"
POLICY = """
default: ask
rules:
  - tools: [Read, Grep]
    action: allow
  - tools: [Bash]
    when: [{path: command, matches: "^rm -rf /$"}]
    action: deny
    reason: never the root
  - tools: [Bash, run_shell_command]
    action: ask
    risk: high
    description: "Run `{{ arguments.command }}`"
"""


def event(name: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVENTS / name).read_text())
    data.update(changes)
    return data


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir()
        self.port = free_port()
        self.config = write_config(tmp_path / "hitl.yaml", self.port)
        self.policy = tmp_path / "gate.yaml"
        self.policy.write_text(POLICY)
        self.env = server_env(self.state_dir)

    async def hook(
        self, host: str, data: Any, *more: str, files: list[str] | None = None
    ) -> tuple[int, Any, str]:
        """Run the hook; ``files``: how the policy and config are named (default: as documented)."""
        named = files if files is not None else ["--policy", str(self.policy), "--config", str(self.config)]
        args = ["-m", "hitl_mcp", "hook", host, *named, "--state-dir", str(self.state_dir), *more]
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        result = await anyio.run_process([PYTHON, *args], input=raw, env=self.env, check=False, cwd=str(ROOT))
        out = result.stdout.decode().strip()
        return result.returncode, json.loads(out) if out else None, result.stderr.decode()

    def api(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{self.port}", headers={"Authorization": f"Bearer {TOKEN}"}
        )

    async def answer_next(self, decision: str, comment: str | None = None) -> dict[str, Any]:
        """Answer the first request that shows up pending. The API has no push for a token holder
        (``/events`` is for inbox sessions), so its listing is read again every 50 ms until then."""
        async with self.api() as api:
            changes = Changes()

            async def pending() -> dict[str, Any] | None:
                listing = (await api.get("/api/requests?status=pending")).json()["requests"]
                return listing[0] if listing else None

            async def tick() -> None:
                while True:
                    await anyio.sleep(0.05)
                    changes.fire()

            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                request = await until(pending, changes, seconds=30)
                tg.cancel_scope.cancel()
            body = {"decision": decision, **({"comment": comment} if comment else {})}
            response = await api.post(f"/api/requests/{request['id']}/reply", json=body)
            assert response.status_code == 200, response.text
            return request


async def hook_answered(setup: Setup, host: str, data: Any, decision: str, comment: str | None = None) -> Any:
    outcome: Any = None
    async with anyio.create_task_group() as tg:

        async def run_hook() -> None:
            nonlocal outcome
            outcome = await setup.hook(host, data)

        tg.start_soon(run_hook)
        request = await setup.answer_next(decision, comment)
    return outcome, request


async def test_claude_code_pretooluse_approved_from_the_phone(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (code, out, _), request = await hook_answered(
            setup, "claude-code", event("claude-code-pretooluse.json"), "approve"
        )
    assert code == 0
    assert out["hookSpecificOutput"]["hookEventName"] == "PreToolUse"
    assert out["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert isinstance(out["hookSpecificOutput"]["permissionDecisionReason"], str)
    assert request["text"] == "Run `git push --force origin main`"
    assert request["risk"] == "high"
    assert request["payload"] == {
        "tool": "Bash",
        "arguments": {"command": "git push --force origin main", "description": "Force-push main"},
    }


async def test_claude_code_pretooluse_denied_with_the_reason(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (code, out, _), _ = await hook_answered(
            setup, "claude-code", event("claude-code-pretooluse.json"), "deny", "not on a Friday"
        )
    assert code == 0
    decision = out["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"
    assert "not on a Friday" in decision["permissionDecisionReason"]


async def test_claude_code_permission_request_allow_and_deny_shapes(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (_, allowed, _), _ = await hook_answered(
            setup, "claude-code", event("claude-code-permissionrequest.json"), "approve"
        )
        # the same event again (it has no tool_use_id): a new request, not the old approval
        again = event("claude-code-permissionrequest.json")
        (_, denied, _), _ = await hook_answered(
            setup, "claude-code", again, "deny", "use the Makefile target"
        )
    assert allowed == {
        "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
    }
    assert denied["hookSpecificOutput"]["hookEventName"] == "PermissionRequest"
    assert denied["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    assert "use the Makefile target" in denied["hookSpecificOutput"]["decision"]["message"]


async def test_policy_allow_and_deny_need_no_server(tmp_path: Path) -> None:
    setup = Setup(tmp_path)  # nothing listens on its port
    read = event("claude-code-pretooluse.json", tool_name="Read", tool_input={"file_path": "/etc/hosts"})
    code, out, _ = await setup.hook("claude-code", read)
    assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == "allow"
    root = event("claude-code-pretooluse.json", tool_input={"command": "rm -rf /"})
    code, out, _ = await setup.hook("claude-code", root)
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert out["hookSpecificOutput"]["permissionDecisionReason"] == "denied by policy: never the root"


async def test_fail_closed_without_a_server_or_an_answer(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    pre = event("claude-code-pretooluse.json")
    code, out, err = await setup.hook("claude-code", pre)
    assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "cannot ask through hitl-mcp" in out["hookSpecificOutput"]["permissionDecisionReason"]
    assert "cannot ask through hitl-mcp" in err  # and in the host's log
    code, out, _ = await setup.hook("claude-code", pre, "--on-failure", "ask")
    assert out["hookSpecificOutput"]["permissionDecision"] == "ask"
    code, out, _ = await setup.hook(
        "claude-code", event("claude-code-permissionrequest.json"), "--on-failure", "ask"
    )
    assert code == 0 and out is None  # nothing printed: Claude Code shows its own dialog
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        code, out, _ = await setup.hook("claude-code", pre, "--timeout", "1")
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "no answer from the person within 1 s" in out["hookSpecificOutput"]["permissionDecisionReason"]


async def test_a_bad_event_blocks_with_exit_2(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    code, out, err = await setup.hook("claude-code", b"not json")
    assert code == 2 and out is None and "not JSON" in err
    code, out, err = await setup.hook("claude-code", {"hook_event_name": "Stop"})
    assert code == 2 and "hook_event_name 'Stop'" in err


async def test_codex_pretooluse_prints_only_a_deny(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (code, approved, _), request = await hook_answered(
            setup, "codex", event("codex-pretooluse.json"), "approve"
        )
        retry = event("codex-pretooluse.json", tool_use_id="call_other")
        (_, denied, _), _ = await hook_answered(setup, "codex", retry, "deny", "ask me tomorrow")
    assert code == 0 and approved is None  # an allow prints nothing: Codex's own policy applies
    assert request["payload"]["arguments"] == {"command": "git push --force origin main"}
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "ask me tomorrow" in denied["hookSpecificOutput"]["permissionDecisionReason"]


async def test_off_loopback_the_hook_sends_the_configured_token(tmp_path: Path) -> None:
    """Off loopback the server's /mcp needs the web token: the hook finds it in the config."""
    setup = Setup(tmp_path)
    setup.config.write_text(
        f"server:\n  http: {{host: 0.0.0.0, port: {setup.port}}}\n"
        f"defaults:\n  heartbeat_seconds: 1\nchannels:\n  web: {{type: web, token: {TOKEN}}}\n"
    )
    setup.env.pop("HITL_WEB_TOKEN")
    url = f"http://127.0.0.1:{setup.port}"
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        outcome: Any = None
        async with anyio.create_task_group() as tg:

            async def run_hook() -> None:
                nonlocal outcome
                outcome = await setup.hook("claude-code", event("claude-code-pretooluse.json"), "--url", url)

            tg.start_soon(run_hook)
            await setup.answer_next("approve")
    code, out, _ = outcome
    assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == "allow"


async def test_gemini_cli_before_tool(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (code, approved, _), request = await hook_answered(
            setup, "gemini-cli", event("gemini-cli-beforetool.json"), "approve"
        )
        other = event("gemini-cli-beforetool.json", tool_input={"command": "make deploy"})
        (_, denied, _), _ = await hook_answered(setup, "gemini-cli", other, "deny", "after the freeze")
    assert code == 0 and approved == {"decision": "allow"}
    assert request["text"] == "Run `git push --force origin main`"
    assert denied["decision"] == "deny" and "after the freeze" in denied["reason"]
    code, out, _ = await setup.hook("gemini-cli", event("gemini-cli-beforetool.json"), "--on-failure", "ask")
    assert code == 0 and out == {}  # no server; ask: Gemini CLI goes on as without the hook


async def test_a_server_that_never_answers_gets_a_deny_within_the_timeout(tmp_path: Path) -> None:
    """A server that accepts connections and never answers: the decision is printed within
    ``--timeout`` plus a second of the hook's start (the bound asserted adds the process's own start,
    which a loaded machine stretches to seconds; before the fix it took 52 s with --timeout 3), and it
    is the failure verdict, never an exit 1. The timeout leaves room for the hook to load its config
    and connect on a loaded machine (its clock starts before that)."""
    setup = Setup(tmp_path)
    accepted = anyio.Event()

    async def mute(stream: anyio.abc.SocketStream) -> None:
        accepted.set()
        async with stream:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    await stream.receive()  # read everything, answer nothing

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=setup.port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, mute)
        for on_failure, verdict in (("deny", "deny"), ("ask", "ask")):
            started = anyio.current_time()
            code, out, err = await setup.hook(
                "claude-code",
                event("claude-code-pretooluse.json"),
                "--timeout",
                "4",
                "--on-failure",
                on_failure,
            )
            took = anyio.current_time() - started
            assert accepted.is_set()
            assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == verdict, err
            assert (
                "no answer from the person within 4 s"
                in out["hookSpecificOutput"]["permissionDecisionReason"]
            )
            assert took < 4 + 12, f"the decision took {took:.1f} s"
        tg.cancel_scope.cancel()


async def test_a_bad_timeout_blocks_with_exit_2(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    code, out, err = await setup.hook("claude-code", event("claude-code-pretooluse.json"), "--timeout", "0")
    assert code == 2 and out is None and "--timeout must be more than 0 seconds" in err


async def test_claude_code_edit_is_shown_as_the_diff_against_the_file_on_disk(tmp_path: Path) -> None:
    """A real PreToolUse event for Edit on a real file: the person is shown the diff that would
    apply, computed from the file as it is on disk (the agent's own words are not taken for it), with
    its hash; a Bash call is shown as its command, with the risk its content carries."""
    setup = Setup(tmp_path)
    project = tmp_path / "shop"
    (project / "src").mkdir(parents=True)
    (project / "src" / "db.py").write_text(
        "def connect():\n    return Database(url, timeout=5)\n\n\nRETRIES = 3\n"
    )
    edit = event(
        "claude-code-pretooluse.json",
        cwd=str(project),
        tool_name="Edit",
        tool_input={"file_path": "src/db.py", "old_string": "timeout=5", "new_string": "timeout=30"},
        tool_use_id="toolu_01EDIT",
    )
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (code, out, _), request = await hook_answered(setup, "claude-code", edit, "approve")
        assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == "allow"
        (file,) = request["preview"]["files"]
        assert (file["path"], file["status"], file["added"], file["removed"]) == (
            "src/db.py",
            "modified",
            1,
            1,
        )
        assert "-    return Database(url, timeout=5)\n+    return Database(url, timeout=30)\n" in file["diff"]
        assert request["preview_sha256"] and request["payload"]["arguments"]["old_string"] == "timeout=5"
        rm = event("claude-code-pretooluse.json", tool_input={"command": "rm -rf build"}, cwd=str(project))
        (_, out, _), request = await hook_answered(setup, "claude-code", rm, "deny")
        assert request["preview"] == {"kind": "command", "command": "rm -rf build", "cwd": str(project)}
        assert request["risk_reasons"] == ["deletes recursively without asking (rm -rf build)"]
    assert (project / "src" / "db.py").read_text().count("timeout=5") == 1  # the hook never writes


async def test_the_policy_is_policy_and_the_older_config_spelling_still_works(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    read = event("claude-code-pretooluse.json", tool_name="Read", tool_input={"file_path": "/etc/hosts"})
    older = ["--config", str(setup.policy), "--server-config", str(setup.config)]
    code, out, err = await setup.hook("claude-code", read, files=older)
    assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert f"`--config` names the policy file for one more release only; use `--policy {setup.policy}`" in err
    code, out, err = await setup.hook("claude-code", read)
    assert code == 0 and out["hookSpecificOutput"]["permissionDecision"] == "allow" and "warning" not in err
    code, out, err = await setup.hook("claude-code", read, files=[])
    assert code == 2 and out is None and "name the policy file: --policy gate.yaml" in err


async def test_post_tool_use_records_the_outcome_of_an_approved_call(tmp_path: Path) -> None:
    """After the approved tool ran, Claude Code's ``PostToolUse`` reports it as the approval's outcome
    (``executed``, the SHA-256 of the tool's response), with a receipt linked to the decision's; its
    ``PostToolUseFailure`` as ``failed`` with the error. Nothing is printed and nothing blocks; a call
    nobody was asked about records nothing."""
    from hitl_mcp.gate.hooks import claude_code
    from hitl_mcp.gate.outcome import outcome_of

    setup = Setup(tmp_path)
    ran = event("claude-code-posttooluse.json")
    failed = event("claude-code-posttoolusefailure.json", tool_use_id="toolu_02FAILED")
    async with server_process(serve_args(setup.config, "--transport", "http"), setup.env):
        (_, allowed, _), request = await hook_answered(
            setup, "claude-code", event("claude-code-pretooluse.json"), "approve"
        )
        assert allowed["hookSpecificOutput"]["permissionDecision"] == "allow"
        code, out, err = await setup.hook("claude-code", ran)
        assert (code, out) == (0, None), err
        (_, allowed, _), other = await hook_answered(
            setup,
            "claude-code",
            event("claude-code-pretooluse.json", tool_use_id="toolu_02FAILED"),
            "approve",
        )
        code, out, err = await setup.hook("claude-code", failed)
        assert (code, out) == (0, None), err
        # a call no person approved through this hook (no note): nothing to record, and no complaint
        code, out, err = await setup.hook(
            "claude-code", event("claude-code-posttooluse.json", tool_use_id="toolu_03")
        )
        assert (code, out, err) == (0, None, "")
        async with setup.api() as api:
            audit = (await api.get(f"/api/requests/{request['id']}")).json()["audit"]
            receipts = (await api.get(f"/api/requests/{request['id']}/receipt")).json()["receipts"]
            failed_audit = (await api.get(f"/api/requests/{other['id']}")).json()["audit"]
    (executed,) = [row for row in audit if row["event"] == "outcome_reported"]
    assert executed["data"]["status"] == "executed"
    assert executed["data"]["result_sha256"] == outcome_of(claude_code.parse(ran))["result_sha256"]
    assert [r["kind"] for r in receipts] == ["hitl.decision", "hitl.outcome"]
    (error,) = [row for row in failed_audit if row["event"] == "outcome_reported"]
    assert error["data"]["status"] == "failed" and "failed to push" in error["data"]["summary"]
    # the note is used once: the same event again records nothing more (the server would refuse it)
    assert not any((setup.state_dir / "hook-calls").iterdir())
