"""The ``hitl-mcp`` command: run the server, write and check configs, open the inbox, and answer
from a terminal.

The verbs about requests (pending, show, history, answer, approve, deny) are in ``cli_requests.py``;
``audit`` in ``cli_audit.py``. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import logging
import secrets
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from hitl_mcp import __version__
from hitl_mcp.cli.requests import CliError, open_broker, run
from hitl_mcp.cli.requests import config_and_state as _config
from hitl_mcp.kit.pipes import reader_gone, stopped_reading
from hitl_mcp.kit.terminal import visible

# The config, the SDK and the store are imported by the verbs that use them, when they run: `serve`
# loads them with the collector paused (see main), and the other verbs only what they use. The verbs'
# modules load with their parsers (build_parser): `serve`, which a host starts, builds only its own.

__all__ = ["CliError", "build_parser", "main"]

log = logging.getLogger("hitl_mcp")


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only_serve=words[:1] == ["serve"])
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    # A server's start makes some 10^5 objects that live as long as it does (the SDK's types, the
    # config's and our models, the tools' schemas): the collector's passes over them meanwhile free
    # nothing and cost about a tenth of a cold start. serving.resume_collector turns it back on once
    # the start is served.
    paused = args.func is cmd_serve and gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _run(args)
    finally:
        if paused:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    try:
        return _verb(args)
    except (OSError, sqlite3.Error) as exc:  # the state directory or the database, after it opened
        from hitl_mcp.store.health import storage_error

        print(f"hitl-mcp: {storage_error(exc)}", file=sys.stderr)
        return 1


def _verb(args: argparse.Namespace) -> int:
    from hitl_mcp.config import ConfigError

    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away shows here when the output fit in the buffer
        return code
    except BrokenPipeError:
        if not reader_gone(sys.stdout):
            raise  # another pipe (a socket, a subprocess): said below as what it was
        return stopped_reading()
    except ConfigError as exc:  # every problem found, one line each (all missing variables at once)
        for problem in [exc, *exc.more]:
            print(f"hitl-mcp: config error: {problem}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, MissingLibrary) else 1
    except KeyboardInterrupt:
        return 130


def build_parser(*, only_serve: bool = False) -> argparse.ArgumentParser:
    """Every verb's parser; ``only_serve``: just ``serve``'s (a server's start builds nothing else)."""
    parser = argparse.ArgumentParser(
        prog="hitl-mcp", description="An MCP server that lets agents reach a person."
    )
    parser.add_argument("--version", action="version", version=f"hitl-mcp {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", "-c", help="the YAML config (default: the embedded default)")
        p.add_argument("--state-dir", help="where the database lives (default ~/.local/state/hitl-mcp)")

    p = command("serve", cmd_serve, "run the MCP server")
    common(p)
    p.add_argument("--transport", choices=["stdio", "sse", "http"], default="stdio")
    p.add_argument("--host", help="HTTP address (default from config, 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default from config, 8765)")
    if only_serve:
        return parser

    from hitl_mcp.cli import agents as cli_agents
    from hitl_mcp.cli import gate as gate_cli
    from hitl_mcp.cli import oauth as cli_oauth
    from hitl_mcp.cli import people as cli_people
    from hitl_mcp.cli import receipts as cli_receipts
    from hitl_mcp.cli import rules as cli_rules
    from hitl_mcp.cli.delegate import add_delegate, cmd_delegate
    from hitl_mcp.cli.requests import cmd_answer, cmd_approve, cmd_deny, cmd_history, cmd_pending, cmd_show
    from hitl_mcp.cli.store import cmd_migrate

    p = command("inbox", cmd_inbox, "print the inbox's login link (it holds the web token)")
    common(p)
    p.add_argument("--open", action="store_true", help="open it in the browser too")
    p.add_argument(
        "--port", type=int, help="the port the server listens on (default $HITL_PORT, else config)"
    )

    p = command("init", cmd_init, "write a commented starter config")
    p.add_argument("path", nargs="?", default="hitl.yaml", help="where to write it; missing folders are made")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")

    p = command("check", cmd_check, "validate a config and print it, secrets masked; check the database")
    common(p)

    p = command("migrate", cmd_migrate, "bring the database's schema up to this version (either store)")
    common(p)

    p = command("test-channel", cmd_test_channel, "send a test message through one channel")
    common(p)
    p.add_argument("name", help="the channel's name in the config")

    p = command("pending", cmd_pending, "list requests waiting for an answer")
    common(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("show", cmd_show, "print one request whole: text, payload and its SHA-256, outcome, trail")
    common(p)
    p.add_argument("id", help="the request id (or a unique start of it)")
    p.add_argument("--json", action="store_true", help="print JSON (what GET /api/requests/{id} returns)")

    def through_api(p: argparse.ArgumentParser) -> None:
        """Used when server.cli.require_token is set: the answer goes through the server's API."""
        p.add_argument("--url", help="the server's base URL (default: from server.http)")
        p.add_argument("--token-file", help="a file holding the web token (default: $HITL_WEB_TOKEN)")

    p = command("answer", cmd_answer, "answer a question")
    common(p)
    through_api(p)
    p.add_argument("id", help="the request id (or a unique start of it)")
    p.add_argument("text", help="the answer: free text or one of the choices")

    for name, func in (("approve", cmd_approve), ("deny", cmd_deny)):
        p = command(name, func, f"{name} a pending approval")
        common(p)
        through_api(p)
        p.add_argument("id", help="the request id (or a unique start of it)")
        p.add_argument("--comment", help="a note for the agent")

    p = command("history", cmd_history, "list recent requests and what became of them")
    common(p)
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("logout", cmd_logout, "sign out of the web inbox: end inbox sessions")
    common(p)
    p.add_argument("--all", action="store_true", help="end every inbox session (required)")

    p = command("audit", cmd_audit, "check the audit log (verify), or show its head and last anchor (head)")
    common(p)
    p.add_argument("action", nargs="?", choices=["verify", "head"])
    p.add_argument("--anchor", help="the anchors to check against (default: audit.anchor in the state dir)")

    p = command("delegate", cmd_delegate, "let someone stand in for a person: set, --list or --end")
    common(p)
    add_delegate(p)

    cli_rules.add_commands(command, common)
    cli_agents.add_commands(command, common)
    cli_oauth.add_commands(command, common)
    cli_people.add_commands(command, common)
    cli_receipts.add_commands(command, common)
    gate_cli.add_proxy(command("proxy", gate_cli.cmd_proxy, "put another MCP server's tools behind approval"))
    gate_cli.add_hook(command("hook", gate_cli.cmd_hook, "answer a host's permission prompt from a hook"))
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    from hitl_mcp.config import resolve_http_port
    from hitl_mcp.runtime import ConfigRefused
    from hitl_mcp.serving import loop_options, serve, setup_logging

    config, state_dir = _config(args)
    setup_logging(config.server.log_level)
    host = args.host or config.server.http.host
    port = resolve_http_port(config, args.port)
    if args.transport == "stdio" and sys.stdin.isatty():  # a person, not an MCP host, started it
        print(
            "hitl-mcp: waiting for an MCP host on stdin (the stdio transport: a host such as Claude starts "
            "it). To run it standalone: hitl-mcp serve --transport http, then hitl-mcp inbox --open. "
            "Ctrl-C or Ctrl-D ends it.",
            file=sys.stderr,
        )
    try:
        # uvloop for HTTP, where many calls are served at once; over stdio (one host, an inbox for one
        # person) asyncio's own loop does, and the start does not import uvloop (bench/cold_start.py)
        options = loop_options() if args.transport != "stdio" else {}
        anyio.run(serve, config, state_dir, args.transport, host, port, backend_options=options)
    except ConfigRefused as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 2
    return 0


def _require_libraries(channels: dict[str, Any]) -> None:
    """A configured channel's library that is not installed: one line naming the extra to install."""
    from hitl_mcp.channels import missing_libraries

    missing = missing_libraries(channels)
    if missing:
        raise MissingLibrary(missing)


class MissingLibrary(CliError):
    """A channel's extra is not installed: exits 2, like a config the server refuses."""


def cmd_inbox(args: argparse.Namespace) -> int:
    from hitl_mcp.cli.inbox import inbox

    config, state_dir = _config(args)
    return inbox(config, state_dir, args.port, args.open)


def cmd_init(args: argparse.Namespace) -> int:
    from hitl_mcp.config import starter_config_text

    path = Path(args.path)
    if path.exists() and not args.force:
        print(f"hitl-mcp: {path} exists; use --force to overwrite it", file=sys.stderr)
        return 1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the commented ntfy block's topic is a password: each init writes its own, never a shared one
        topic = "hitl-" + secrets.token_urlsafe(18)
        path.write_text(starter_config_text().replace("{ntfy_topic}", topic))
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file, not a folder" if blocker else exc.strerror or exc
        raise CliError(f"cannot write {path}: {why}") from None
    print(f"wrote {path}; check it with: hitl-mcp check --config {path}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import yaml

    from hitl_mcp.channels import channel_module
    from hitl_mcp.channels.base import Channel, DeliveryError
    from hitl_mcp.cli.store import check_store
    from hitl_mcp.config import effective_config

    config, state_dir = _config(args)
    _require_libraries(config.channels)
    print(f"# {config.source or 'embedded default'}: valid")
    print(yaml.safe_dump(effective_config(config), sort_keys=False), end="")
    failed = check_store(config, state_dir)
    if failed is None:  # SQLite: the file in the state directory
        failed = _check_database(state_dir)

    async def probe(name: str, channel: Channel) -> None:
        nonlocal failed
        limit = channel.check_seconds  # longer than the channel's own timeouts: it says what timed out
        try:
            with anyio.fail_after(limit):
                print(f"# channel {name}: {await channel.check()}")
        except (DeliveryError, TimeoutError) as exc:
            failed += 1
            print(f"# channel {name}: FAILED: {str(exc) or f'no answer within {limit:g} s'}")

    async def probe_all() -> None:
        for name, cfg in config.channels.items():
            cls = channel_module(cfg.type).Channel
            if cls.check is not Channel.check:
                await probe(name, cls(name, cfg, None))  # check() needs no hub

    anyio.run(probe_all)
    return 1 if failed else 0


def _check_database(state_dir: Path) -> int:
    """The state directory's database, if there is one: is it whole? 1 when it is not."""
    from hitl_mcp.store.health import database_problem
    from hitl_mcp.store.select import DB_FILE

    path = state_dir / DB_FILE
    problem = database_problem(path)
    if problem:
        print(f"hitl-mcp: {problem}", file=sys.stderr)
        return 1
    print(f"# database {path}: {'whole' if path.exists() else 'none yet'}")
    return 0


def cmd_test_channel(args: argparse.Namespace) -> int:
    from hitl_mcp.broker import AskSpec
    from hitl_mcp.channels import channel_module
    from hitl_mcp.core.models import Kind

    config, _ = _config(args)
    if args.name not in config.channels:
        valid = ", ".join(config.channels) or "(none)"
        print(f"hitl-mcp: no channel {args.name!r} in the config; channels: {valid}", file=sys.stderr)
        return 2
    cfg = config.channels[args.name]
    _require_libraries({args.name: cfg})
    # the outbox logs a failed delivery as the server would; here the one line below says it
    logging.getLogger("hitl_mcp").setLevel(logging.CRITICAL + 1)

    async def go() -> int:
        async with open_broker(args) as broker:
            broker.channels[args.name] = channel_module(cfg.type).Channel(args.name, cfg, broker)
            result = await broker.notify(
                AskSpec(
                    kind=Kind.NOTIFICATION,
                    text="Test message from hitl-mcp: this channel works.",
                    title="hitl-mcp test",
                    channels=[args.name],
                )
            )
        for failure in result.failed:
            print(
                f"hitl-mcp: {args.name}: not delivered: {visible(failure['error'], newlines=False)}",
                file=sys.stderr,
            )
        if result.failed:
            return 1
        print(f"{args.name}: test message delivered")
        return 0

    return run(go)


def cmd_logout(args: argparse.Namespace) -> int:
    if not args.all:
        print("hitl-mcp: say which sessions: --all ends every inbox session", file=sys.stderr)
        return 2

    async def go() -> int:
        async with open_broker(args) as broker:
            ended = await broker.end_sessions()
        print(f"ended {ended} inbox session{'' if ended == 1 else 's'}; sign in again with the login link")
        return 0

    return run(go)


def cmd_audit(args: argparse.Namespace) -> int:
    from hitl_mcp.cli.audit import audit_head, audit_verify
    from hitl_mcp.store.anchor import ANCHOR_FILE

    if args.action is None:  # like logout without --all: say what there is to choose, exit 2
        print(
            "hitl-mcp: audit what? hitl-mcp audit verify (check the chain, the requests and the "
            "anchors) or hitl-mcp audit head (the newest row and the last anchor)",
            file=sys.stderr,
        )
        return 2

    async def go() -> int:
        async with open_broker(args) as broker:
            anchor_file = Path(args.anchor) if args.anchor else broker.state_dir / ANCHOR_FILE
            command = audit_verify if args.action == "verify" else audit_head
            return await command(broker.history, anchor_file)

    return run(go)


if __name__ == "__main__":
    sys.exit(main())
