"""The ``hitl-mcp`` command: run the server, write and check configs, and answer from a terminal.

The answering verbs (pending, answer, approve, deny, history, audit verify) open the same state
directory as the server, so they work whether or not a server is running; a server that is waiting
on the request sees the answer within half a second.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from hitl_mcp import __version__
from hitl_mcp.config import (
    Config,
    ConfigError,
    effective_config,
    load_config,
    resolve_http_port,
    resolve_state_dir,
    starter_config_text,
)
from hitl_mcp.terminal import block, visible

log = logging.getLogger("hitl_mcp")


class CliError(Exception):
    """Said on one line, and the command exits 1."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"hitl-mcp: config error: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 1
    except (OSError, sqlite3.Error) as exc:  # the state directory or the database, after it opened
        from hitl_mcp.store.health import storage_error

        print(f"hitl-mcp: {storage_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
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

    p = command("init", cmd_init, "write a commented starter config")
    p.add_argument("path", nargs="?", default="hitl.yaml")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")

    p = command("check", cmd_check, "validate a config and print it, secrets masked; check the database")
    common(p)

    p = command("test-channel", cmd_test_channel, "send a test message through one channel")
    common(p)
    p.add_argument("name", help="the channel's name in the config")

    p = command("pending", cmd_pending, "list requests waiting for an answer")
    common(p)
    p.add_argument("--json", action="store_true", help="print JSON")

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
    p.add_argument("action", choices=["verify", "head"])
    p.add_argument("--anchor", help="the anchors to check against (default: audit.anchor in the state dir)")
    return parser


class _Visible(logging.Formatter):
    """Log lines quote agents (a client's name) and providers: their control characters are shown."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)  # stdout belongs to the stdio transport
    handler.setFormatter(_Visible("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("hitl_mcp").setLevel(level.upper())


def _config(args: argparse.Namespace) -> tuple[Config, Path]:
    config = load_config(args.config)
    return config, resolve_state_dir(config, getattr(args, "state_dir", None))


def cmd_serve(args: argparse.Namespace) -> int:
    from hitl_mcp.runtime import ConfigRefused, serve

    config, state_dir = _config(args)
    setup_logging(config.server.log_level)
    host = args.host or config.server.http.host
    port = resolve_http_port(config, args.port)
    try:
        anyio.run(serve, config, state_dir, args.transport, host, port, backend_options=_loop_options())
    except ConfigRefused as exc:
        print(f"hitl-mcp: {exc}", file=sys.stderr)
        return 2
    return 0


def _loop_options() -> dict[str, Any]:
    """uvloop where it is installed (it is a dependency except on Windows): a faster event loop."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if path.exists() and not args.force:
        print(f"hitl-mcp: {path} exists; use --force to overwrite it", file=sys.stderr)
        return 1
    path.write_text(starter_config_text())
    print(f"wrote {path}; check it with: hitl-mcp check --config {path}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import yaml

    from hitl_mcp.channels import channel_module
    from hitl_mcp.channels.base import Channel, DeliveryError

    config, state_dir = _config(args)
    print(f"# {config.source or 'embedded default'}: valid")
    print(yaml.safe_dump(effective_config(config), sort_keys=False), end="")
    failed = _check_database(state_dir)

    async def probe(name: str, channel: Channel) -> None:
        nonlocal failed
        try:
            with anyio.fail_after(20):
                print(f"# channel {name}: {await channel.check()}")
        except (DeliveryError, TimeoutError) as exc:
            failed += 1
            print(f"# channel {name}: FAILED: {exc or 'no answer within 20s'}")

    async def probe_all() -> None:
        for name, cfg in config.channels.items():
            cls = channel_module(cfg.type).Channel
            if cls.check is not Channel.check:
                await probe(name, cls(name, cfg, None))  # check() needs no hub

    anyio.run(probe_all)
    return 1 if failed else 0


def _check_database(state_dir: Path) -> int:
    """The state directory's database, if there is one: is it whole? 1 when it is not."""
    from hitl_mcp.runtime import DB_FILE
    from hitl_mcp.store.health import database_problem

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
    from hitl_mcp.models import Kind

    config, _ = _config(args)
    if args.name not in config.channels:
        valid = ", ".join(config.channels) or "(none)"
        print(f"hitl-mcp: no channel {args.name!r} in the config; channels: {valid}", file=sys.stderr)
        return 2
    cfg = config.channels[args.name]

    async def go() -> int:
        async with _broker(args) as broker:
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
            print(f"hitl-mcp: {args.name}: not delivered: {failure['error']}", file=sys.stderr)
            return 1
        print(f"{args.name}: test message delivered")
        return 0

    return _run(go)


@contextlib.asynccontextmanager
async def _broker(args: argparse.Namespace) -> AsyncIterator[Any]:
    from hitl_mcp.anchor import configured_anchor
    from hitl_mcp.broker import Broker, Defaults
    from hitl_mcp.runtime import DB_FILE
    from hitl_mcp.store.health import storage_error
    from hitl_mcp.store.sqlite import SqliteStore

    config, state_dir = _config(args)
    store = SqliteStore(state_dir / DB_FILE, configured_anchor(config, state_dir))
    try:
        await store.open()
    except (OSError, sqlite3.Error) as exc:
        await store.close()
        raise CliError(storage_error(exc, store.path)) from None
    try:
        yield Broker(store, {}, Defaults({}, {}), state_dir=state_dir)
    except sqlite3.Error as exc:
        raise CliError(storage_error(exc, store.path)) from None
    finally:
        await store.close()


def _run(fn: Callable[..., Any], *args: Any) -> int:
    return int(anyio.run(fn, *args) or 0)


def cmd_pending(args: argparse.Namespace) -> int:
    from hitl_mcp.models import Status

    async def go() -> int:
        requests: list[Any] = []
        async with _broker(args) as broker:  # every one, a page at a time: none is hidden by a cap
            while page := await broker.store.list(
                Status.PENDING, 1000, requests[-1].id if requests else None
            ):
                requests += page
        _print_requests(requests, args.json, pending=True)
        return 0

    return _run(go)


def cmd_history(args: argparse.Namespace) -> int:
    async def go() -> int:
        async with _broker(args) as broker:
            requests = await broker.store.list(None, max(1, args.limit))
        _print_requests(requests, args.json, pending=False)
        return 0

    return _run(go)


def _print_requests(requests: list[Any], as_json: bool, pending: bool) -> None:
    from hitl_mcp.models import iso
    from hitl_mcp.results import format_duration
    from hitl_mcp.web.api import request_json

    if as_json:
        print(json.dumps([request_json(r) for r in requests], indent=2))
        return
    if not requests:
        print("nothing pending" if pending else "no requests yet")
        return
    import time

    indent = " " * 18
    for r in requests:  # the text, choices and names are an agent's or a remote person's: shown, not obeyed
        line = f"{r.id}  {r.kind.value:<12} {r.status.value:<9} {block(r.text, indent)}"
        if r.choices:
            line += f"  [{' / '.join(visible(c, newlines=False) for c in r.choices)}]"
        print(line)
        if pending and r.expires_at:
            left = format_duration(r.expires_at - time.time())
            print(f"{indent}expires in {left}, from {visible(r.client_name or '?', newlines=False)}")
        elif not pending and r.status.value != "pending":
            who = f" by {r.responder} via {r.channel}" if r.responder else ""
            print(f"{indent}{r.status.value}{visible(who, newlines=False)} at {iso(r.closed_at)}")


def _resolve_cmd(args: argparse.Namespace, **reply_fields: Any) -> int:
    from hitl_mcp.broker import NotFound, ReplyInvalid
    from hitl_mcp.models import Reply

    config, _ = _config(args)
    if config.server.cli.require_token:  # never the database itself: the server's API, with the token
        from hitl_mcp.cli_remote import answer_via_api

        return answer_via_api(config, args, reply_fields)

    async def go() -> int:
        async with _broker(args) as broker:
            found = await _find(broker, args.id)
            if len(found) != 1:
                if found:
                    why = f"{args.id!r} is the start of more than one request id; give more of it"
                else:
                    why = f"no request matches {args.id!r} (see: hitl-mcp pending)"
                print(f"hitl-mcp: {why}", file=sys.stderr)
                return 1
            (request_id,) = found
            reply = Reply(channel="cli", responder=f"{getpass.getuser()} (terminal)", **reply_fields)
            try:
                verdict = await broker.resolve(request_id, reply)
            except (ReplyInvalid, NotFound) as exc:  # may quote the agent's choices
                print(f"hitl-mcp: {visible(exc, newlines=False)}", file=sys.stderr)
                return 1
            if not verdict.won:  # names who answered, as their channel knows them
                print(f"hitl-mcp: not recorded: {visible(verdict.reason, newlines=False)}", file=sys.stderr)
                return 1
            r = verdict.request
            what = r.answer if r.kind.value == "question" else ("approved" if r.approved else "denied")
            print(f"{r.id}: {visible(what, newlines=False)}")
            return 0

    return _run(go)


async def _find(broker: Any, prefix: str) -> list[str]:
    """The request an id names, or the ones it is the start of (at least 4 characters): a pending
    request first, else any. Two ids back mean the prefix is ambiguous."""
    from hitl_mcp.models import Status

    if not prefix.isascii() or not prefix.isprintable():
        return []
    if await broker.get(prefix) is not None:
        return [prefix]
    if len(prefix) < 4:
        return []
    return await broker.store.ids_starting(prefix, Status.PENDING) or await broker.store.ids_starting(prefix)


def cmd_answer(args: argparse.Namespace) -> int:
    return _resolve_cmd(args, text=args.text)


def cmd_approve(args: argparse.Namespace) -> int:
    return _resolve_cmd(args, decision="approve", comment=args.comment)


def cmd_deny(args: argparse.Namespace) -> int:
    return _resolve_cmd(args, decision="deny", comment=args.comment)


def cmd_logout(args: argparse.Namespace) -> int:
    if not args.all:
        print("hitl-mcp: say which sessions: --all ends every inbox session", file=sys.stderr)
        return 2

    async def go() -> int:
        async with _broker(args) as broker:
            ended = await broker.store.end_sessions()
        print(f"ended {ended} inbox session{'' if ended == 1 else 's'}; sign in again with the login link")
        return 0

    return _run(go)


def cmd_audit(args: argparse.Namespace) -> int:
    from hitl_mcp.cli_audit import audit_head, audit_verify

    async def go() -> int:
        async with _broker(args) as broker:
            anchor_file = Path(args.anchor) if args.anchor else broker.store.anchor.path
            return await (audit_verify if args.action == "verify" else audit_head)(broker.store, anchor_file)

    return _run(go)


if __name__ == "__main__":
    sys.exit(main())
