"""``hitl-mcp rules list|add|revoke``, ``pause`` and ``resume``: remembered answers and the kill
switch, from a terminal, on the state directory's database (a running server sees them at once)."""

from __future__ import annotations

import argparse
import getpass
import json
from collections.abc import Callable
from typing import Any

from hitl_mcp.cli.requests import CliError, group_options, one_line, open_broker, run

Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def actor() -> str:
    return f"{getpass.getuser()} (terminal)"


def add_commands(command: Command, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = command(
        "rules",
        cmd_rules,
        "list, add or revoke remembered answers (rules that approve without asking); alone: list",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    p.set_defaults(verb="list", json=False, live=False)  # `rules` alone lists
    common(p)
    listing = verbs.add_parser("list", help="every rule: who added it, when, expiry, uses left, times fired")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--live", action="store_true", help="only rules that can still fire")
    revoke = verbs.add_parser("revoke", help="revoke a rule: it never fires again")
    revoke.add_argument("id", help="the rule's id (hitl-mcp rules list)")
    add = verbs.add_parser("add", help="add a rule (see docs/rules.md for what it matches)")
    add.add_argument(
        "--agent",
        required=True,
        help="the principal it answers for (stdio:claude-code, agent:ci-bot, operator), or *",
    )
    add.add_argument(
        "--tool", required=True, help="a glob on the tool name (or the approval's title or text)"
    )
    add.add_argument(
        "--arguments",
        default="null",
        help='the argument pattern, JSON: null, {"exact": ...} or {"match": {...}} (default: null, any)',
    )
    add.add_argument("--hours", help="expires after this many hours (default 24 without --uses)")
    add.add_argument("--uses", help="fires at most this many times")
    add.add_argument(
        "--high-risk", action="store_true", help="may also approve risk: high calls (asks to confirm)"
    )
    add.add_argument("--yes", action="store_true", help="confirm --high-risk without asking")
    for shared in (listing, revoke, add):
        common(shared)
    group_options(p, [listing, revoke, add])

    p = command(
        "pause", cmd_pause, "kill switch: deny new approvals at once and freeze deadlines until resume"
    )
    common(p)
    p.add_argument("--reason", default="", help="said in every approval denied meanwhile")
    p = command("resume", cmd_resume, "end the pause: push pending deadlines back by the time paused")
    common(p)


def cmd_rules(args: argparse.Namespace) -> int:
    from hitl_mcp.core.errors import BrokerError
    from hitl_mcp.core.models import now
    from hitl_mcp.core.rules import rule_id, shown_id

    async def go() -> int:
        async with open_broker(args) as broker:
            try:
                if args.verb == "revoke":
                    number = rule_id(args.id)
                    if number is None:  # no rule can have it: the same words as an id none has
                        raise CliError(f"no rule with id {one_line(shown_id(args.id))}")
                    rule = await broker.revoke_rule(number, actor())
                    print(f"rule {rule.id} revoked (it fired {rule.fired} times)")
                elif args.verb == "add":
                    rule = await broker.add_rule(**_add_arguments(args), created_by=actor())
                    print(f"rule {rule.id} added")
                else:
                    print_rules(await broker.rules(live=args.live), args.json, now())
            except BrokerError as exc:
                raise CliError(str(exc)) from None
        return 0

    return run(go)


def _add_arguments(args: argparse.Namespace) -> dict[str, Any]:
    from hitl_mcp.core.rules import MAX_USES, load_pattern, whole

    try:
        pattern = load_pattern(args.arguments)
    except ValueError as exc:
        raise CliError(f"--arguments: {exc}") from None
    try:
        uses = None if args.uses is None else whole(args.uses, "--uses", MAX_USES)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    hours = None
    if args.hours is not None:
        try:
            hours = float(args.hours) if args.hours.strip().isascii() else None
        except ValueError:
            pass
        if hours is None:
            raise CliError("--hours is a number of hours, in the digits 0-9")
    if args.high_risk and not args.yes:
        answer = input("This rule may approve high-risk calls without asking anyone. Type yes to confirm: ")
        if answer.strip().lower() != "yes":
            raise CliError("not added: a rule for high-risk calls needs a confirmation")
    return {
        "agent": args.agent,
        "tool": args.tool,
        "arguments": pattern,
        "hours": hours,
        "uses": uses,
        "high_risk": args.high_risk,
    }


def print_rules(rules: list[Any], as_json: bool, at: float) -> None:
    from hitl_mcp.core.durations import format_duration
    from hitl_mcp.core.rules import binds_words, pattern_words, rule_json, unescape

    if as_json:
        print(json.dumps([rule_json(r, at) for r in rules], indent=2))
        return
    if not rules:
        print("no rules")
        return
    print(f"{'ID':>4}  {'STATE':<8} {'FIRED':>5}  {'LEFT':<14} {'AGENT':<20} RULE")
    for r in rules:  # agents wrote the tool names and arguments: shown, not obeyed
        if r.revoked_at is not None:
            state = "revoked"
        else:
            state = "live" if r.live(at) else "spent" if r.uses_left == 0 else "expired"
        left = []
        if r.expires_at is not None and r.live(at):
            left.append(format_duration(r.expires_at - at))
        if r.uses_left is not None:
            left.append(f"{r.uses_left} uses")
        what = f"{unescape(r.tool)} with {pattern_words(r.arguments)}" + (
            " (high risk too)" if r.high_risk else ""
        )
        print(
            f"{r.id:>4}  {state:<8} {r.fired:>5}  {', '.join(left) or '-':<14} {one_line(r.agent)[:20]:<20} "
            f"{one_line(what)}"
        )
        print(f"{'':>6}binds {one_line(binds_words(r))}")
        print(
            f"{'':>6}added by {one_line(r.created_by)}"
            + (f"; revoked by {one_line(r.revoked_by)}" if r.revoked_by else "")
        )


def cmd_pause(args: argparse.Namespace) -> int:
    from hitl_mcp.core.errors import BrokerError

    async def go() -> int:
        async with open_broker(args) as broker:
            try:
                pause = await broker.pause(actor(), args.reason)
            except BrokerError as exc:
                raise CliError(str(exc)) from None
        print(
            f"approvals {pause.words}: new ones are denied at once and deadlines wait until hitl-mcp resume"
        )
        return 0

    return run(go)


def cmd_resume(args: argparse.Namespace) -> int:
    from hitl_mcp.core.durations import format_duration
    from hitl_mcp.core.errors import BrokerError

    async def go() -> int:
        async with open_broker(args) as broker:
            try:
                seconds, moved = await broker.resume(actor())
            except BrokerError as exc:
                raise CliError(str(exc)) from None
        print(f"resumed after {format_duration(seconds)}; {moved} pending deadlines pushed back by as much")
        return 0

    return run(go)
