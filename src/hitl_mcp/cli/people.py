"""``hitl-mcp people invite|passkeys``: people of ``people:`` sign in to the inbox with passkeys.

``invite NAME`` makes a one-time enrolment link that expires (``--ttl``, 24 h by default): opened on
the person's laptop or phone, it registers a passkey for them, once. A new invite replaces the one
before. ``passkeys NAME`` lists a person's passkeys; ``--remove ID`` removes one (its sign-ins and
step-ups are refused from then on). Each change is an audit row.
"""

from __future__ import annotations

import argparse
import json
import secrets
from collections.abc import Callable
from urllib.parse import urlsplit

from hitl_mcp.cli.requests import CliError, config_and_state, one_line, open_broker, run
from hitl_mcp.cli.rules import actor
from hitl_mcp.core.durations import parse_duration
from hitl_mcp.core.models import iso, now
from hitl_mcp.core.principal import token_digest

Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]
DEFAULT_TTL = "24h"


def add_commands(command: Command, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = command("people", cmd_people, "invite a person to register a passkey; list or remove passkeys")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    invite = verbs.add_parser("invite", help="print a one-time enrolment link for a person of people:")
    invite.add_argument("name", help="the person (a key of people: in the config)")
    invite.add_argument("--ttl", default=DEFAULT_TTL, help="how long the link works (default 24h; 5m to 30d)")
    invite.add_argument("--json", action="store_true", help='print {"person", "link", "expires_at"}')
    keys = verbs.add_parser("passkeys", help="list a person's passkeys, or remove one")
    keys.add_argument("name", help="the person")
    keys.add_argument("--remove", metavar="ID", help="remove this passkey (its ID as the list shows it)")
    keys.add_argument("--json", action="store_true", help="print JSON")
    for shared in (invite, keys):
        common(shared)


def cmd_people(args: argparse.Namespace) -> int:
    from hitl_mcp.web.passkeys import INVITE, PASSKEY, Passkey

    config, _ = config_and_state(args)
    if args.name not in config.people:
        known = ", ".join(config.people) or "none are configured"
        raise CliError(f"no person {one_line(args.name)!r} in the config's people: ({known})")
    ttl = 0.0
    if args.verb == "invite":
        try:
            ttl = parse_duration(args.ttl)
        except ValueError as exc:
            raise CliError(f"--ttl: {exc}") from None
        if not 300 <= ttl <= 30 * 86400:
            raise CliError("--ttl: must be between 5m and 30d")

    async def go() -> int:
        async with open_broker(args) as broker:
            store = broker.store
            if args.verb == "invite":
                await store.revoke_credential(INVITE, args.name, actor())  # a new link replaces the last
                token = secrets.token_urlsafe(32)
                expires = now() + ttl
                data = {"expires_at": round(expires, 3)}
                await store.add_credential(INVITE, args.name, token_digest(token), data, actor())
                link = f"{address(config)}/enrol/{args.name}/{token}"
                if args.json:
                    print(json.dumps({"person": args.name, "link": link, "expires_at": iso(expires)}))
                else:
                    print(link)
                    print(f"for {args.name}: works once, until {iso(expires)}; open it on their device")
                return 0
            rows = [r for r in await store.credentials(PASSKEY) if r.data.get("person") == args.name]
            live = [r for r in rows if r.revoked_at is None]
            if args.remove:
                name = f"{args.name}/{args.remove}"
                if await store.revoke_credential(PASSKEY, name, actor()) is None:
                    raise CliError(
                        f"{args.name} has no passkey {one_line(args.remove)!r} "
                        f"(see: hitl-mcp people passkeys {args.name})"
                    )
                print(f"removed {args.name}'s passkey {args.remove}: it is refused from now on")
                return 0
            keys = [Passkey.of(r.name, r.data, r.created_at) for r in live]
            if args.json:
                listed = [
                    {"id": k.name.split("/", 1)[1], "label": k.label, "added": iso(k.created_at)}
                    for k in keys
                ]
                print(json.dumps(listed, indent=2))
            elif not keys:
                print(f"{args.name} has no passkey: hitl-mcp people invite {args.name} makes a link for one")
            for key in keys if not args.json else []:
                print(
                    f"{key.name.split('/', 1)[1]:<10} {one_line(key.label):<24} added {iso(key.created_at)}"
                )
        return 0

    return run(go)


def address(config: object) -> str:
    """The inbox's address: ``server.public_url``, else where the server listens."""
    from hitl_mcp.config import Config, resolve_http_port
    from hitl_mcp.kit.net import browser_url

    assert isinstance(config, Config)
    if config.server.public_url:
        return config.server.public_url.rstrip("/")
    # a passkey's relying party is a host name, never an address: loopback is "localhost"
    found = urlsplit(browser_url(config.server.http.host, resolve_http_port(config, None)))
    host = "localhost" if found.hostname in ("127.0.0.1", "::1") else found.netloc.rsplit(":", 1)[0]
    return f"{found.scheme}://{host}:{found.port}"
