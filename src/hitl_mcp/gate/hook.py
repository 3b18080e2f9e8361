"""``hitl-mcp hook <host>``: a host's permission hook, answered by a person through a running server.

It reads one hook event on stdin, decides it by the policy file (``policy.py``), and for ``ask``
asks through a running ``hitl-mcp serve --transport http``: as an MCP client of its ``/mcp``
endpoint, with the web token, calling ``request_approval`` (payload: the tool and its arguments;
idempotency key: the host's tool call id) and then ``wait_for_response`` until the deadline. It
never opens the database. It prints the decision in the host's format (``hooks/``).

Fail closed: no server, no token, an error, or no answer before ``--timeout`` is a deny, or (with
``--on-failure ask``) the host's own prompt. Only an approval the person gave is an allow. The
decision is printed within ``--timeout`` plus about a second whatever the server does (a watchdog
thread prints it and ends the process): a host treats a hook it had to kill as a non-blocking error,
and runs the tool. Any unexpected error is a deny too; the exit code is never 1 (which hosts take as
"go ahead").

It asks as the agent its token names (``$HITL_AGENT_TOKEN``, from ``hitl-mcp agent add``), else as
the operator (the web token, found as the server finds it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

import anyio

from hitl_mcp.gate.hooks import BadEvent, HookCall, Verdict
from hitl_mcp.gate.policy import Decision, Policy, load_policy

#: the most stdin a hook event may take (a large Write's content fits)
MAX_EVENT = 8 * 1024 * 1024
#: each wait_for_response at most this long, so a heartbeat-less wait never outlives the deadline much
WAIT_STEP = 20.0
MODULES = {"claude-code": "claude_code", "codex": "codex", "gemini-cli": "gemini_cli"}
#: how long past ``--timeout`` the decision may take, whatever the server does
GRACE = 1.0


@dataclass(frozen=True)
class Server:
    url: str
    token: str | None


class Unanswered(Exception):
    """Why the person's answer is not known: one line, in the failure's reason."""


async def ask_person(
    server: Server, call: HookCall, decision: Decision, host: str, seconds: float
) -> tuple[bool, str]:
    """Ask through the server and wait; (approved, the reason to show). Raises ``Unanswered``."""
    payload = {"tool": call.tool, "arguments": call.arguments}
    arguments: dict[str, Any] = {
        "action": decision.description,
        "details": f"{host} wants to run the tool `{call.tool}`"
        + (f" in {call.cwd}" if call.cwd else "")
        + ".",
        "payload": payload,
        "risk": decision.risk,
    }
    if call.call_id:
        # the host's id for this one tool call: a hook run again for it re-attaches, never re-asks. An
        # event without one (PermissionRequest, Gemini CLI) asks afresh each time: a key made from the
        # arguments would let an old approval answer the same command run again later
        arguments["idempotency_key"] = f"{host}:{call.call_id}"[:200]
    if decision.channels:
        arguments["channels"] = decision.channels
    if decision.to:
        arguments["to"] = decision.to
    if decision.timeout_seconds:
        arguments["timeout_seconds"] = decision.timeout_seconds
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    deadline = anyio.current_time() + seconds
    try:
        with anyio.fail_after(seconds):  # the whole exchange, connecting and closing included
            outcome = await _asked(server, arguments, headers, host, seconds, deadline)
    except TimeoutError:
        raise Unanswered(f"no answer from the person within {seconds:g} s") from None
    if outcome.get("approved") is True:
        return True, f"approved by {outcome.get('responder') or 'the person'} (hitl-mcp)"
    status = outcome.get("status")
    if status != "answered":
        because = f" ({outcome['comment']})" if status == "cancelled" and outcome.get("comment") else ""
        return False, f"not approved: the request was {status} before anyone answered{because}"
    comment = f": {outcome['comment']}" if outcome.get("comment") else ""
    return False, f"denied by {outcome.get('responder') or 'the person'}{comment}"


async def _asked(
    server: Server,
    arguments: dict[str, Any],
    headers: dict[str, str],
    host: str,
    seconds: float,
    deadline: float,
) -> dict[str, Any]:
    """The outcome, once settled or once the deadline is near (then ``Unanswered``)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.types import Implementation

    try:
        async with httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=WAIT_STEP + 30)
        ) as http:
            transport = streamable_http_client(f"{server.url}/mcp", http_client=http)
            info = Implementation(name=f"hitl-mcp-hook-{host}", version="1")
            async with Client(
                transport, mode="legacy", client_info=info, read_timeout_seconds=WAIT_STEP + 30
            ) as client:
                arguments["wait_seconds"] = min(WAIT_STEP, seconds)
                outcome = _outcome(await client.call_tool("request_approval", arguments))
                while outcome.get("status") == "pending":
                    left = deadline - anyio.current_time()
                    if left <= 0.5:
                        raise Unanswered(f"no answer from the person within {seconds:g} s")
                    wait = {"request_id": outcome["request_id"], "wait_seconds": min(WAIT_STEP, left)}
                    outcome = _outcome(await client.call_tool("wait_for_response", wait))
                return outcome
    except Unanswered:
        raise
    except Exception as exc:  # any failure to reach or read the server fails closed
        raise Unanswered(f"cannot ask through hitl-mcp at {server.url}: {_first_line(exc)}") from None


def _outcome(result: Any) -> dict[str, Any]:
    if result.is_error or not isinstance(result.structured_content, dict):
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise Unanswered(f"the server refused: {text.strip()[:300]}")
    return dict(result.structured_content)


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _first_line(exc.exceptions[0])
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def decide(
    policy: Policy, call: HookCall, host: str, server: Server | None, timeout: float, on_failure: Verdict
) -> tuple[Verdict, str]:
    decision = policy.decide(call.tool, call.arguments)
    if decision.action == "allow":
        return "allow", "allowed by the hitl-mcp policy"
    if decision.action == "deny":
        return "deny", f"denied by policy: {decision.reason or 'this call is not allowed'}"
    try:
        if server is None:
            raise Unanswered("no hitl-mcp server is configured")
        approved, reason = anyio.run(ask_person, server, call, decision, host, timeout)
    except Unanswered as exc:
        return on_failure, f"hitl-mcp: {exc}"
    return ("allow" if approved else "deny"), reason


def find_server(args: argparse.Namespace) -> Server:
    """The server's address and the token to ask with: ``$HITL_AGENT_TOKEN``, else the web token,
    found as the server finds it: the web channel's ``token`` in the config, else ``$HITL_WEB_TOKEN``,
    else the token file in the state directory (read only: a missing file is no token, and the
    server refuses the call)."""
    from hitl_mcp.cli_remote import server_url
    from hitl_mcp.config import load_config, resolve_state_dir
    from hitl_mcp.web.auth import TOKEN_FILE

    config = load_config(args.server_config)
    url = server_url(config, args.url)
    if os.environ.get("HITL_AGENT_TOKEN"):  # an agent's own token (hitl-mcp agent add)
        return Server(url, os.environ["HITL_AGENT_TOKEN"])
    web = next((c for c in config.channels.values() if c.type == "web"), None)
    secret = getattr(web, "token", None)
    if secret is not None:
        return Server(url, secret.get_secret_value())
    if os.environ.get("HITL_WEB_TOKEN"):
        return Server(url, os.environ["HITL_WEB_TOKEN"])
    try:
        token = (Path(resolve_state_dir(config, args.state_dir)) / TOKEN_FILE).read_text().strip()
    except OSError:
        token = ""
    return Server(url, token or None)


class Said:
    """The hook's decision, printed exactly once: from the person's answer, or by the watchdog when
    the deadline comes first (which then ends the process at once)."""

    def __init__(self, host: Any, call: HookCall) -> None:
        self.host = host
        self.call = call
        self._lock = threading.Lock()
        self._said = False

    def say(self, verdict: Verdict, reason: str) -> bool:
        with self._lock:
            if self._said:
                return False
            self._said = True
        output = self.host.render(self.call, verdict, reason)
        if output is not None:
            print(json.dumps(output), flush=True)
        if verdict != "allow":
            print(reason, file=sys.stderr, flush=True)
        return True

    def watchdog(self, seconds: float, verdict: Verdict, reason: str) -> threading.Timer:
        def fire() -> None:
            if self.say(verdict, reason):
                os._exit(0)  # the main thread may be stuck in the network: nothing else to wait for

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timer.start()
        return timer


def cmd_hook(args: argparse.Namespace) -> int:
    host = import_module(f"hitl_mcp.gate.hooks.{MODULES[args.host]}")
    on_failure: Verdict = args.on_failure
    if not args.timeout > 0:
        print("hitl-mcp hook: --timeout must be more than 0 seconds", file=sys.stderr)
        return 2
    try:
        raw = sys.stdin.buffer.read(MAX_EVENT + 1)
        if len(raw) > MAX_EVENT:
            raise BadEvent(f"the hook event is larger than {MAX_EVENT // 1024 // 1024} MiB")
        try:
            event = json.loads(raw or b"null")
        except ValueError:
            raise BadEvent("the hook event on stdin is not JSON") from None
        call: HookCall = host.parse(event)
    except BadEvent as exc:
        # exit 2 blocks the call in both hosts, with stderr as the reason
        print(f"hitl-mcp hook: {exc}", file=sys.stderr)
        return 2
    said = Said(host, call)
    late = f"hitl-mcp: no answer from the person within {args.timeout:g} s"
    timer = said.watchdog(args.timeout + GRACE, on_failure, late)
    try:
        verdict, reason = _decided(args, call, on_failure)
    except Exception as exc:  # whatever went wrong, a deny: never the exit 1 that lets the tool run
        verdict, reason = "deny", f"hitl-mcp: the hook failed: {_first_line(exc)}"
    finally:
        timer.cancel()
    said.say(verdict, reason)
    return 0


def _decided(args: argparse.Namespace, call: HookCall, on_failure: Verdict) -> tuple[Verdict, str]:
    from hitl_mcp.config import ConfigError

    try:
        policy = load_policy(args.config)
    except ConfigError as exc:
        return "deny", f"hitl-mcp: the policy file is broken: {exc}"
    try:
        server = find_server(args)
    except ConfigError as exc:
        print(f"hitl-mcp hook: config error: {exc}", file=sys.stderr)
        server = None
    return decide(policy, call, args.host, server, args.timeout, on_failure)
