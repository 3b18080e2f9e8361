"""``hitl-mcp proxy`` and ``hitl-mcp hook``: their arguments, and the verbs (the gate itself is a
library: ``gate/``). Light on purpose: ``main.py`` imports this to build its parser, and the modules
that do the work load only when a verb runs.

The policy file is ``--policy``, and ``--config`` is the server's config, as for every other verb.
For one release, ``--config`` without ``--policy`` still names the policy file (with a warning), and
``--server-config`` still names the server's config."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from hitl_mcp.cli.requests import CliError

if TYPE_CHECKING:
    from hitl_mcp.config import Config
    from hitl_mcp.gate.hook import Server
    from hitl_mcp.gate.hooks import HookCall, Verdict
    from hitl_mcp.gate.policy import Policy

HOSTS = ("claude-code", "codex", "gemini-cli")


OLD_CONFIG = (
    "warning: `--config` names the policy file for one more release only; use `--policy {path}` "
    "(then `--config` is the server's config, as for every other verb)"
)


def _files(p: argparse.ArgumentParser, server: str) -> None:
    p.add_argument("--policy", "-p", help="the policy file (gate.yaml): rules and default")
    p.add_argument(
        "--config",
        "-c",
        help=f"the hitl-mcp config: {server} (default: embedded). Without --policy, for one more "
        "release: the policy file",
    )
    p.add_argument("--server-config", help="the same as --config with --policy (the older name)")


def policy_and_config(args: argparse.Namespace) -> tuple[str, str | None]:
    """The policy file and the server's config, from ``--policy`` / ``--config`` and the older
    spellings; raises ``CliError`` when they do not say."""
    if args.policy:
        if args.config and args.server_config:
            raise CliError("name the server's config once: --config (or the older --server-config)")
        return args.policy, args.config or args.server_config
    if args.config:
        print(f"hitl-mcp: {OLD_CONFIG.format(path=args.config)}", file=sys.stderr)
        return args.config, args.server_config
    raise CliError("name the policy file: --policy gate.yaml")


def add_proxy(p: argparse.ArgumentParser) -> None:
    _files(p, "channels, state dir, inbox")
    p.add_argument("--state-dir", help="where the database lives (default ~/.local/state/hitl-mcp)")
    p.add_argument(
        "--port", type=int, help="the inbox and API port (default $HITL_PORT, else the config's, 8765)"
    )
    p.add_argument("--upstream", metavar="URL", help="a streamable HTTP upstream, instead of a command")
    p.add_argument(
        "--call-timeout", type=float, default=600.0, help="seconds an upstream call may take (default 600)"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the upstream's command and arguments")


def add_hook(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", choices=HOSTS, help="whose hook event is on stdin")
    _files(p, "where the server listens, its state dir")
    p.add_argument("--state-dir", help="where the web token file is (default ~/.local/state/hitl-mcp)")
    p.add_argument("--url", help="the running server's base URL (default: from the server config)")
    p.add_argument(
        "--timeout",
        type=float,
        default=55.0,
        help="seconds to wait for the person; keep it under the hook's own timeout (default 55)",
    )
    p.add_argument(
        "--on-failure",
        choices=["deny", "ask"],
        default="deny",
        help="no server, no answer in time: deny (default), or ask, the host's own prompt",
    )


def cmd_proxy(args: argparse.Namespace) -> int:
    from hitl_mcp.config import load_config, resolve_state_dir
    from hitl_mcp.gate.policy import load_policy
    from hitl_mcp.gate.run import serve_proxy
    from hitl_mcp.gate.upstream import Upstream
    from hitl_mcp.runtime import ConfigRefused
    from hitl_mcp.serving import loop_options, setup_logging

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if bool(command) == bool(args.upstream):
        raise CliError("name one upstream: --upstream URL, or -- followed by the command to run")
    if args.call_timeout <= 0:
        raise CliError("--call-timeout must be more than 0 seconds")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise CliError(f"--port must be a port number from 1 to 65535, not {args.port}")
    policy_file, args.server_config = policy_and_config(args)
    policy = load_policy(policy_file)
    config = load_config(args.server_config)
    state_dir = resolve_state_dir(config, args.state_dir)
    setup_logging(config.server.log_level)
    upstream = Upstream(command=command or None, url=args.upstream, timeout=args.call_timeout)
    unknown = _unknown_channels(policy, config)
    if unknown:
        raise CliError(
            f"{policy_file}: unknown channel {unknown}; configured channels: {', '.join(config.channels)}"
        )
    try:
        anyio.run(serve_proxy, config, state_dir, upstream, policy, args.port, backend_options=loop_options())
    except ConfigRefused as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 2
    return 0


def _unknown_channels(policy: Policy, config: Config) -> str | None:
    named = [*(policy.channels or [])]
    for rule in policy.rules:
        named += rule.channels or []
    unknown = [name for name in named if name not in config.channels]
    return repr(unknown[0]) if unknown else None


def find_server(args: argparse.Namespace) -> Server:
    """The server's address and the token to ask with: ``$HITL_AGENT_TOKEN``, else the web token,
    found as the server finds it: the web channel's ``token`` in the config, else ``$HITL_WEB_TOKEN``,
    else the token file in the state directory (read only: a missing file is no token, and the
    server refuses the call)."""
    from hitl_mcp.cli.remote import local_address
    from hitl_mcp.config import load_config, resolve_state_dir
    from hitl_mcp.gate.hook import Server
    from hitl_mcp.web.auth import TOKEN_FILE

    config = load_config(args.server_config)
    state_dir = Path(resolve_state_dir(config, args.state_dir))
    url = args.url.rstrip("/") if args.url else local_address(config, state_dir, mcp=True)
    if os.environ.get("HITL_AGENT_TOKEN"):  # an agent's own token (hitl-mcp agent add)
        return Server(url, os.environ["HITL_AGENT_TOKEN"], state_dir)
    web = next((c for c in config.channels.values() if c.type == "web"), None)
    secret = getattr(web, "token", None)
    if secret is not None:
        return Server(url, secret.get_secret_value(), state_dir)
    if os.environ.get("HITL_WEB_TOKEN"):
        return Server(url, os.environ["HITL_WEB_TOKEN"], state_dir)
    try:
        token = (state_dir / TOKEN_FILE).read_text().strip()
    except OSError:
        token = ""
    return Server(url, token or None, state_dir)


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
    from hitl_mcp.gate.hook import GRACE, MAX_EVENT, MODULES, first_line
    from hitl_mcp.gate.hooks import AFTER, BadEvent

    host = import_module(f"hitl_mcp.gate.hooks.{MODULES[args.host]}")
    on_failure: Verdict = args.on_failure
    if not args.timeout > 0:
        print("hitl-mcp hook: --timeout must be more than 0 seconds", file=sys.stderr)
        return 2
    try:
        args.policy, args.server_config = policy_and_config(args)
    except CliError as exc:
        print(f"hitl-mcp hook: {exc}", file=sys.stderr)  # exit 2: the host blocks the call
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
    if call.event in AFTER:
        return _after(args, call)
    said = Said(host, call)
    late = f"hitl-mcp: no answer from the person within {args.timeout:g} s"
    timer = said.watchdog(args.timeout + GRACE, on_failure, late)
    try:
        verdict, reason = _decided(args, call, on_failure)
    except Exception as exc:  # whatever went wrong, a deny: never the exit 1 that lets the tool run
        verdict, reason = "deny", f"hitl-mcp: the hook failed: {first_line(exc)}"
    finally:
        timer.cancel()
    said.say(verdict, reason)
    return 0


def _decided(args: argparse.Namespace, call: HookCall, on_failure: Verdict) -> tuple[Verdict, str]:
    from hitl_mcp.config import ConfigError
    from hitl_mcp.gate.hook import decide
    from hitl_mcp.gate.outcome import remember
    from hitl_mcp.gate.policy import load_policy

    try:
        policy = load_policy(args.policy)
    except ConfigError as exc:
        return "deny", f"hitl-mcp: the policy file is broken: {exc}"
    try:
        server = find_server(args)
    except ConfigError as exc:
        print(f"hitl-mcp hook: config error: {exc}", file=sys.stderr)
        server = None
    found = server

    def approved_by(request_id: str) -> None:  # a note for the after hook (gate/outcome.py)
        if found is not None and found.state_dir is not None:
            with contextlib.suppress(OSError):
                remember(found.state_dir, args.host, call, request_id)

    return decide(policy, call, args.host, server, args.timeout, on_failure, approved_by)


def _after(args: argparse.Namespace, call: HookCall) -> int:
    """PostToolUse: the outcome of a call a person approved, reported; never blocks (exit 0)."""
    from hitl_mcp.config import ConfigError
    from hitl_mcp.gate.outcome import record_after

    try:
        server = find_server(args)
    except ConfigError as exc:
        print(f"hitl-mcp hook: config error: {exc}", file=sys.stderr)
        return 0
    if server.state_dir is not None:
        problem = record_after(server, server.state_dir, args.host, call)
        if problem:
            print(f"hitl-mcp hook: {problem}", file=sys.stderr)
    return 0
