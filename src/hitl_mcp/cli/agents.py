"""``hitl-mcp agent add|list|revoke``: the agent tokens that MCP over HTTP needs (``principal.py``).

``add`` makes a token, prints it once with what to paste into a host, and keeps only its SHA-256 in
the store; each change is an audit row. The config's ``agents:`` (tokens from ``${ENV}``) are listed
beside them, and are changed in the config.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hitl_mcp.cli.requests import CliError, config_and_state, group_options, one_line, open_broker, run
from hitl_mcp.cli.rules import actor
from hitl_mcp.core.principal import AGENT_CREDENTIAL, check_agent_name, token_digest

if TYPE_CHECKING:
    from pathlib import Path

    from hitl_mcp.config import Config

Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def add_commands(command: Command, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = command(
        "agent", cmd_agent, "add, list or revoke the agent tokens that MCP over HTTP needs; alone: list"
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    p.set_defaults(verb="list", json=False)  # `agent` alone lists
    common(p)
    add = verbs.add_parser("add", help="make a token for an agent: printed once, kept only as a hash")
    add.add_argument("name", help="the agent's name: letters, digits, '.', '_', '-'")
    add.add_argument("--json", action="store_true", help='print {"name", "token"} only')
    listing = verbs.add_parser("list", help="every agent: from the config and added, live and revoked")
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = verbs.add_parser("revoke", help="revoke an agent's token: its calls are refused from then on")
    revoke.add_argument("name", help="the agent's name")
    for shared in (add, listing, revoke):
        common(shared)
    group_options(p, [add, listing, revoke])


def cmd_agent(args: argparse.Namespace) -> int:
    from hitl_mcp.core.store import KeyConflict

    config, state_dir = config_and_state(args)
    if args.verb in ("add", "revoke"):
        try:
            check_agent_name(args.name)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if args.name in config.agents:
            raise CliError(f"agent {args.name!r} is set in the config's agents: change it there")

    async def go() -> int:
        async with open_broker(args) as broker:
            store = broker.store
            if args.verb == "add":
                token = secrets.token_urlsafe(32)
                try:
                    await store.add_credential(AGENT_CREDENTIAL, args.name, token_digest(token), {}, actor())
                except KeyConflict:
                    raise CliError(
                        f"agent {args.name!r} has a token already: hitl-mcp agent revoke {args.name} first"
                    ) from None
                print_added(config, state_dir, args.name, token, args.json)
            elif args.verb == "revoke":
                if await store.revoke_credential(AGENT_CREDENTIAL, args.name, actor()) is None:
                    raise CliError(f"no agent {args.name!r} with a live token (see: hitl-mcp agent list)")
                print(f"agent {args.name!r} revoked: its token is refused from now on")
            else:
                print_agents(config, await store.credentials(AGENT_CREDENTIAL), args.json)
        return 0

    return run(go)


def mcp_url(config: Config, state_dir: Path) -> str:
    """Where a host reaches this server's MCP endpoint."""
    from hitl_mcp.cli.remote import local_address

    return f"{config.server.public_url or local_address(config, state_dir, mcp=True)}/mcp"


def host_snippets(url: str, token: str) -> dict[str, str]:
    """What to paste into each host to connect with ``token``."""
    header = f"Bearer {token}"
    server = {"type": "http", "url": url, "headers": {"Authorization": header}}
    return {
        "Claude Code": f'claude mcp add --transport http hitl {url} --header "Authorization: {header}"',
        "VS Code (.vscode/mcp.json)": json.dumps({"servers": {"hitl": server}}, indent=2),
        "Cursor (~/.cursor/mcp.json)": json.dumps(
            {"mcpServers": {"hitl": {"url": url, "headers": {"Authorization": header}}}}, indent=2
        ),
    }


def print_added(config: Config, state_dir: Path, name: str, token: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"name": name, "token": token}))
        return
    url = mcp_url(config, state_dir)
    print(f"agent {name!r} added. Its token, shown this once (only its hash is kept):\n\n  {token}\n")
    print(f"Connect a host to {url} with it:\n")
    for host, snippet in host_snippets(url, token).items():
        print(f"{host}:\n{snippet}\n")


def print_agents(config: Config, rows: list[Any], as_json: bool) -> None:
    from hitl_mcp.core.models import iso

    agents: list[dict[str, Any]] = [
        {"name": name, "source": "config", "created_at": None, "created_by": None, "revoked_at": None}
        for name in sorted(config.agents)
    ]
    agents += [
        {
            "name": row.name,
            "source": "added",
            "created_at": iso(row.created_at),
            "created_by": row.created_by,
            "revoked_at": iso(row.revoked_at),
        }
        for row in rows
    ]
    if as_json:
        print(json.dumps(agents, indent=2))
        return
    if not agents:
        print("no agents: add one with hitl-mcp agent add NAME (or agents: in the config)")
        return
    for agent in agents:
        if agent["source"] == "config":
            print(f"{one_line(agent['name']):<24} from the config")
            continue
        state = f"revoked {agent['revoked_at']}" if agent["revoked_at"] else "live"
        print(
            f"{one_line(agent['name']):<24} {state:<34} added {agent['created_at']} "
            f"by {one_line(agent['created_by'])}"
        )
