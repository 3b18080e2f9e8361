"""``hitl-mcp delegate``: who stands in for whom while someone is away.

    hitl-mcp delegate owner backup --until 2026-12-24 [--from 2026-12-20]   set (or replace) one
    hitl-mcp delegate --list                                                the config's and the run-time ones
    hitl-mcp delegate --end owner                                           end owner's run-time delegation

Run-time delegations are kept in the store (every server process on it applies them at once) and each
change is an audit row (``delegation_set``, ``delegation_ended``) naming who made it. Setting and ending
are ``delegation.put`` and ``delegation.end``, as in the inbox's Away form.
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from hitl_mcp.cli.requests import CliError, config_and_state, open_broker, run

__all__ = ["add_delegate", "cmd_delegate"]


def add_delegate(p: argparse.ArgumentParser) -> None:
    p.add_argument("person", nargs="?", help="the person who is away (config `people:`)")
    p.add_argument("to", nargs="?", help="the person who stands in for them")
    p.add_argument("--until", help="when it ends: an ISO date (00:00 UTC) or date-time")
    p.add_argument("--from", dest="from_time", help="when it starts (default: now)")
    p.add_argument("--list", action="store_true", help="list the delegations, active and to come")
    p.add_argument("--end", metavar="PERSON", help="end PERSON's run-time delegation now")


def cmd_delegate(args: argparse.Namespace) -> int:
    from hitl_mcp.core import delegation
    from hitl_mcp.core.models import iso, now

    config, _ = config_and_state(args)
    wanted = [bool(args.list), args.end is not None, args.person is not None]
    if sum(wanted) != 1:
        raise CliError(
            "say one thing: `delegate PERSON TO --until WHEN`, `delegate --list` or `delegate --end PERSON`"
        )
    actor = f"{getpass.getuser()} (terminal)"

    async def go() -> int:
        async with open_broker(args) as broker:
            at = now()
            runtime = [d for d in await delegation.stored(broker.store) if d.until > at]
            if args.list:
                _print(config.delegations, runtime, at)
                return 0
            if args.end is not None:
                try:
                    ending = await delegation.end(broker.store, args.end, actor, at)
                except ValueError as exc:
                    raise CliError(str(exc)) from None
                if not ending:
                    from_config = [d for d in config.delegations if d.from_ == args.end and d.until > at]
                    if from_config:
                        raise CliError(
                            f"{args.end}'s delegation to {from_config[0].to} is in the config "
                            "(delegations:); remove it there"
                        )
                    raise CliError(f"no run-time delegation from {args.end!r}")
                print(f"ended: {args.end} no longer delegates to {', '.join(d.to for d in ending)}")
                return 0
            if args.to is None or args.until is None:
                raise CliError("usage: hitl-mcp delegate PERSON TO --until WHEN [--from WHEN]")
            try:
                new = await delegation.put(
                    broker.store,
                    args.person,
                    args.to,
                    args.until,
                    args.from_time or None,
                    people=config.people,
                    configured=config.delegations,
                    actor=actor,
                    at=at,
                )
            except delegation.Refused as exc:
                raise CliError(f"refused: {exc}") from None
            except ValueError as exc:
                hint = ""
                if not config.people:  # the embedded default names nobody: people: is in a config file
                    hint = " (people are named under people: in a config file: pass it with --config FILE)"
                raise CliError(f"{exc}{hint}") from None
            start = f" from {iso(new.from_time)}" if new.from_time is not None else ""
            print(f"delegated: {new.from_} -> {new.to}{start} until {iso(new.until)}")
            return 0

    return run(go)


def _print(configured: list[Any], runtime: list[Any], at: float) -> None:
    from hitl_mcp.core.models import iso

    rows = [(d, "config") for d in configured if d.until > at] + [
        (d, d.set_by or "run time") for d in runtime
    ]
    if not rows:
        print("no delegations")
        return
    for d, source in rows:
        state = "active" if d.is_active(at) else "to come"
        start = f"from {iso(d.from_time)} " if d.from_time is not None else ""
        print(f"{d.from_} -> {d.to}  {state}  {start}until {iso(d.until)}  (set by {source})")
