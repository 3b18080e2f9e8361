"""The verbs about requests: ``pending``, ``history``, ``show``, ``answer``, ``approve`` and ``deny``.

They open the same state directory as the server, so they work whether or not a server is running;
a server that is waiting on the request sees the answer within half a second. Everything a request
says came from an agent or a remote person: it is printed with its control characters shown
(``terminal.visible``), never sent to the terminal as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio

from hitl_mcp.kit.terminal import block, visible

if TYPE_CHECKING:  # imported where used: the CLI starts without the broker's or the config's imports
    from hitl_mcp.broker import Broker
    from hitl_mcp.config import Config

#: the text of a listing starts after the id (16 characters) and two spaces
INDENT = " " * 18


class CliError(Exception):
    """Said on one line, and the command exits 1."""


def group_options(group: argparse.ArgumentParser, verbs: list[argparse.ArgumentParser]) -> None:
    """``--config`` and ``--state-dir`` on a group of verbs typed alone (``hitl-mcp rules --state-dir
    D``) as on each verb: a verb's own, when not given, leaves the group's as it is (argparse would
    otherwise put the verb's default over it)."""
    for parser in (group, *verbs):
        for action in parser._actions:
            if action.dest in ("config", "state_dir") and parser is not group:
                action.default = argparse.SUPPRESS


def config_and_state(args: argparse.Namespace) -> tuple[Config, Any]:
    from hitl_mcp.config import load_config, resolve_state_dir

    config = load_config(args.config)
    return config, resolve_state_dir(config, getattr(args, "state_dir", None))


@contextlib.asynccontextmanager
async def open_broker(args: argparse.Namespace) -> AsyncIterator[Broker]:
    """A broker on the state directory's database, with no channels: for reading and answering."""
    from hitl_mcp.broker import AskDefaults, Broker
    from hitl_mcp.config.policy import policy_from_config
    from hitl_mcp.core.store import StoreError
    from hitl_mcp.runtime import engine_of
    from hitl_mcp.store.health import storage_error
    from hitl_mcp.store.sqlite import SqliteStore

    config, state_dir = config_and_state(args)
    try:
        store = engine_of(config, state_dir, serving=False)
    except StoreError as exc:
        raise CliError(str(exc)) from None
    path = store.path if isinstance(store, SqliteStore) else None
    try:
        await store.open()
    except (OSError, sqlite3.Error, StoreError) as exc:
        await store.close()
        raise CliError(str(exc) if path is None else storage_error(exc, path)) from None
    try:
        # the config's people and delegations: an answer at the terminal is the person whose OS user it is
        yield Broker(store, {}, AskDefaults({}, {}), state_dir=state_dir, policy=policy_from_config(config))
    except sqlite3.Error as exc:
        raise CliError(storage_error(exc, path)) from None
    except StoreError as exc:
        if path is not None:
            raise  # as before for SQLite
        raise CliError(str(exc)) from None  # PostgreSQL unreachable mid-command: one line
    finally:
        await store.close()


def run(fn: Callable[..., Any], *args: Any) -> int:
    return int(anyio.run(fn, *args) or 0)


def one_line(text: object) -> str:
    return visible(text, newlines=False)


# --------------------------------------------------------------------------------------- listings


def cmd_pending(args: argparse.Namespace) -> int:
    from hitl_mcp.core.models import Status

    async def go() -> int:
        requests: list[Any] = []
        async with open_broker(args) as broker:  # every one, a page at a time: none is hidden by a cap
            while page := await broker.history.list(
                Status.PENDING, 1000, requests[-1].id if requests else None
            ):
                requests += page
        print_requests(requests, args.json, pending=True)
        return 0

    return run(go)


def cmd_history(args: argparse.Namespace) -> int:
    async def go() -> int:
        async with open_broker(args) as broker:
            requests = await broker.history.list(None, max(1, args.limit))
        print_requests(requests, args.json, pending=False)
        return 0

    return run(go)


def print_requests(requests: list[Any], as_json: bool, pending: bool) -> None:
    from hitl_mcp.web.api import request_json

    if as_json:
        print(json.dumps([request_json(r) for r in requests], indent=2))
        return
    if not requests:
        print("nothing pending" if pending else "no requests yet")
        return
    for r in requests:  # the text, choices and names are an agent's or a remote person's: shown, not obeyed
        line = f"{r.id}  {r.kind.value:<12} {r.status.value:<9} {block(r.text, INDENT)}"
        if r.choices:
            line += f"  [{' / '.join(one_line(c) for c in r.choices)}]"
        print(line)
        print(INDENT + (waiting_line(r) if pending else outcome_words(r)))


def waiting_line(r: Any) -> str:
    """``risk high · expires in 59 min · from claude-code``: what a pending request's second line says."""
    from hitl_mcp.core.durations import format_duration

    parts = [f"risk {r.risk}"] if r.risk else []
    if r.expires_at:
        parts.append(f"expires in {format_duration(r.expires_at - time.time())}")
    parts.append(f"from {one_line(r.client_name or '?')}")
    return " · ".join(parts)


def outcome_words(r: Any) -> str:
    """What became of a request, in a few words (``wording.fate``): ``approved by alice via slack at
    2026-...``."""
    from hitl_mcp.core.models import Status, iso
    from hitl_mcp.core.wording import fate

    if r.status == Status.NOTIFIED:
        return f"notification, sent to {', '.join(r.channels) or 'no channel'} at {iso(r.created_at)}"
    if r.status == Status.PENDING:
        return f"pending since {iso(r.created_at)}"
    return one_line(fate(r, quote=str, when=f" at {iso(r.closed_at)}" if r.closed_at else ""))


# ------------------------------------------------------------------------------------------- show


def cmd_show(args: argparse.Namespace) -> int:
    from hitl_mcp.web.api import request_detail

    async def go() -> int:
        async with open_broker(args) as broker:
            request_id = await find_one(broker, args.id)
            request = await broker.get(request_id)
            assert request is not None  # find_one found it, and requests are never deleted
            detail = await request_detail(broker.history, request)
        if args.json:
            print(json.dumps(detail, indent=2))
        else:
            print_request(request, detail)
        return 0

    return run(go)


def print_request(r: Any, detail: dict[str, Any]) -> None:
    """One request whole, for a person at a terminal: every field an agent wrote is shown escaped."""
    from hitl_mcp.core.models import iso
    from hitl_mcp.core.principal import owner_label
    from hitl_mcp.core.wording import trail_by, trail_data
    from hitl_mcp.web.views import pretty_json

    pad = " " * 10

    def field(name: str, value: object) -> None:
        print(f"{name:<9} {block(value, pad)}")

    field("id", r.id)
    field("kind", r.kind.value + (f", risk {r.risk}" if r.risk else ""))
    field("status", outcome_words(r))
    field("from", one_line(owner_label(r.owner, r.client_name)))
    field("asked", iso(r.created_at))
    if r.expires_at:
        field("expires", iso(r.expires_at))
    field("channels", ", ".join(r.channels) or "none")
    if r.title:
        field("title", r.title)
    field("text", r.text)
    if r.details:
        field("details", r.details)
    if r.context:
        field("context", r.context)
    if r.choices:
        field("choices", " / ".join(one_line(c) for c in r.choices))
    if r.default_answer is not None:
        field("default", r.default_answer)
    if r.comment:
        field("comment", r.comment)
    if r.payload is not None:
        field("sha256", f"{r.payload_sha256} (of the payload's canonical JSON: sorted keys, no spaces)")
        print("payload")  # JSON escapes control characters itself; visible() shows the invisible ones
        for line in visible(pretty_json(r.payload)).split("\n"):
            print(f"  {line}")
    print("trail")  # the audit rows, and where each delivery stands, in time order
    trail: list[tuple[str, str]] = []
    for row in detail["audit"]:
        actor = one_line(trail_by(row["actor"]))
        data = f" {one_line(json.dumps(trail_data(row['data']), ensure_ascii=False))}" if row["data"] else ""
        trail.append((row["at"], f"{one_line(row['event'])}{actor}{data}"))
    for d in detail["deliveries"]:
        error = f": {one_line(d['error'])}" if d["error"] else ""
        tries = f" ({d['attempts']} attempts)" if d["attempts"] > 1 else ""
        trail.append((d["at"], f"{d['action']} to {one_line(d['channel'])}: {d['status']}{tries}{error}"))
    for at, what in sorted(trail, key=lambda item: item[0]):
        print(f"  {at}  {what}")


# ---------------------------------------------------------------------------------------- answers


async def find(broker: Broker, prefix: str) -> list[str]:
    """The request an id names, or the ones it is the start of (at least 4 characters): a pending
    request first, else any. Two ids back mean the prefix is ambiguous."""
    from hitl_mcp.core.models import Status

    if not prefix.isascii() or not prefix.isprintable():
        return []
    if await broker.get(prefix) is not None:
        return [prefix]
    if len(prefix) < 4:
        return []
    history = broker.history
    return await history.ids_starting(prefix, Status.PENDING) or await history.ids_starting(prefix)


async def find_one(broker: Broker, prefix: str) -> str:
    found = await find(broker, prefix)
    if len(found) == 1:
        return found[0]
    if found:
        raise CliError(f"{prefix!r} is the start of more than one request id; give more of it")
    from hitl_mcp.cli.remote import no_match

    raise CliError(no_match(prefix))


def resolve_cmd(args: argparse.Namespace, **reply_fields: Any) -> int:
    import getpass

    from hitl_mcp.broker import NotFound, ReplyInvalid
    from hitl_mcp.core.escalation import TERMINAL_CHANNEL
    from hitl_mcp.core.models import Reply

    config, _ = config_and_state(args)
    if config.server.cli.require_token:  # never the database itself: the server's API, with the token
        from hitl_mcp.cli.remote import answer_via_api

        return answer_via_api(config, args, reply_fields)

    async def go() -> int:
        async with open_broker(args) as broker:
            request_id = await find_one(broker, args.id)
            user = getpass.getuser()  # the OS user: a person's answer when people: names it (terminal:)
            reply = Reply(
                channel=TERMINAL_CHANNEL, responder=f"{user} (terminal)", identity=user, **reply_fields
            )
            try:
                result = await broker.resolve(request_id, reply)
            except (ReplyInvalid, NotFound) as exc:  # may quote the agent's choices
                print(f"hitl-mcp: {one_line(exc)}", file=sys.stderr)
                return 1
            if result.counted:  # a quorum's vote: the request waits for the others
                print(f"{result.request.id}: vote recorded: {one_line(result.reason)}")
                return 0
            if not result.won:  # names who answered, as their channel knows them
                print(f"hitl-mcp: not recorded: {one_line(result.reason)}", file=sys.stderr)
                return 1
            r = result.request
            what = r.answer if r.kind.value == "question" else ("approved" if r.approved else "denied")
            print(f"{r.id}: {one_line(what)}")
            return 0

    return run(go)


def cmd_answer(args: argparse.Namespace) -> int:
    return resolve_cmd(args, text=args.text)


def cmd_approve(args: argparse.Namespace) -> int:
    return resolve_cmd(args, decision="approve", comment=args.comment)


def cmd_deny(args: argparse.Namespace) -> int:
    return resolve_cmd(args, decision="deny", comment=args.comment)
