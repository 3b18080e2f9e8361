"""``hitl-mcp oauth clients [list|revoke CLIENT_ID]``: the apps the built-in authorization server
let in (``server.oauth.issuer: builtin``, ``web/oauth/``).

``list`` shows each client that registered itself and each metadata-document client (its URL) that
holds a grant, with its live grants. ``revoke`` ends every grant of a client (its access and refresh
tokens are refused from the next request on, by every replica) and, for a registered client, its
registration: it must register again, and the operator consent again, to come back. Each change is
an audit row.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from hitl_mcp.cli.requests import CliError, config_and_state, one_line, open_broker, run
from hitl_mcp.cli.rules import actor

Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def add_commands(command: Command, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = command("oauth", cmd_oauth, "the apps the built-in OAuth server let in: list or revoke them")
    what = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    clients = what.add_parser("clients", help="list the OAuth clients, or revoke one")
    verbs = clients.add_subparsers(dest="verb", metavar="VERB")
    listing = verbs.add_parser("list", help="every client, with its live grants (the default)")
    revoke = verbs.add_parser(
        "revoke", help="end a client's grants (and registration): its tokens are refused"
    )
    revoke.add_argument("client_id", help="the client's id (or its metadata document's URL)")
    for shared in (clients, listing, revoke):
        shared.add_argument("--json", action="store_true", help="print JSON")
        common(shared)


def cmd_oauth(args: argparse.Namespace) -> int:
    from hitl_mcp.web.oauth.grants import Grants

    config, _ = config_and_state(args)
    oauth = config.server.oauth
    if oauth is None or not oauth.builtin:
        raise CliError("the built-in OAuth server is off: set server.oauth.issuer: builtin (docs/remote.md)")

    async def go() -> int:
        async with open_broker(args) as broker:

            async def get_store() -> Any:
                return broker.store

            grants = Grants(get_store, oauth.access_token_ttl, oauth.refresh_token_ttl)
            if args.verb == "revoke":
                known = {c["client_id"] for c in await listed(grants)}
                if args.client_id not in known:
                    raise CliError(f"no OAuth client {args.client_id!r} (see: hitl-mcp oauth clients)")
                ended = await grants.end_client(args.client_id, actor())
                print(f"OAuth client {one_line(args.client_id)!r} revoked: {ended} grant(s) ended")
                return 0
            show(await listed(grants), args.json)
        return 0

    return run(go)


async def listed(grants: Any) -> list[dict[str, Any]]:
    from hitl_mcp.core.models import iso

    live: dict[str, int] = {}
    for grant in await grants.live_grants():
        live[grant.client_id] = live.get(grant.client_id, 0) + 1
    clients: list[dict[str, Any]] = []
    for row in await grants.clients():
        clients.append(
            {
                "client_id": row.name,
                "name": row.data.get("client_name"),
                "kind": "registered",
                "redirect_uris": row.data.get("redirect_uris", []),
                "created_at": iso(row.created_at),
                "revoked_at": iso(row.revoked_at),
                "live_grants": live.pop(row.name, 0) if row.revoked_at is None else 0,
            }
        )
    for client_id, count in live.items():
        clients.append(
            {
                "client_id": client_id,
                "name": None,
                "kind": "metadata document",
                "redirect_uris": [],
                "created_at": None,
                "revoked_at": None,
                "live_grants": count,
            }
        )
    return clients


def show(clients: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps(clients, indent=2))
        return
    if not clients:
        print("no OAuth clients yet: a host registers when it first connects (docs/remote.md)")
        return
    for c in clients:
        state = f"revoked {c['revoked_at']}" if c["revoked_at"] else f"{c['live_grants']} live grant(s)"
        name = f" ({one_line(c['name'])})" if c["name"] else ""
        print(f"{one_line(c['client_id'])}{name}  {c['kind']}, {state}")
