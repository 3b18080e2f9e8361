"""``hitl-mcp people invite|passkeys|devices``: people of ``people:`` sign in to the inbox with passkeys,
and turn on Web Push in it.

``invite NAME`` makes a one-time enrolment link that expires (``--ttl``, 24 h by default): opened on
the person's laptop or phone, it registers a passkey for them, once. A new invite replaces the one
before. ``passkeys NAME`` lists a person's passkeys; ``--remove ID`` removes one (its sign-ins and
step-ups are refused from then on). ``devices NAME`` lists the browsers where NAME (or ``operator``)
turned notifications on; ``--remove ID`` turns one off. Each change is an audit row.
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
    devices = verbs.add_parser(
        "devices", help="list the browsers where a person turned push on, or remove one"
    )
    devices.add_argument("name", help="the person, or operator")
    devices.add_argument("--remove", metavar="ID", help="turn this device off (its ID as the list shows it)")
    devices.add_argument("--json", action="store_true", help="print JSON")
    for shared in (invite, keys, devices):
        common(shared)


def cmd_people(args: argparse.Namespace) -> int:
    from hitl_mcp.web.passkeys import INVITE, PASSKEY, Passkey

    config, _ = config_and_state(args)
    if args.verb == "devices":
        return cmd_devices(args, list(config.people))
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
                    {
                        "id": k.name.split("/", 1)[1],
                        "label": k.label,
                        "added": iso(k.created_at),
                        "credential_id": k.credential_id,
                        "public_key": k.public_key,
                    }
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


def cmd_devices(args: argparse.Namespace, people: list[str]) -> int:
    from hitl_mcp.channels.webpush.devices import OPERATOR_HOLDER
    from hitl_mcp.web.devices import listed, turn_off

    if args.name not in people and args.name != OPERATOR_HOLDER:
        known = ", ".join(people) or "none are configured"
        raise CliError(f"no person {one_line(args.name)!r} in the config's people: ({known}), nor operator")

    async def go() -> int:
        async with open_broker(args) as broker:
            devices = [d for d in await listed(broker) if d["holder"] == args.name]
            if args.remove:
                found = [d for d in devices if d["id"] == args.remove]
                if not found:
                    raise CliError(
                        f"{args.name} has no device {one_line(args.remove)!r} "
                        f"(see: hitl-mcp people devices {args.name})"
                    )
                await turn_off(broker, found[0]["name"], actor())
                print(f"turned off {args.name}'s device {args.remove}: no more pushes, its buttons stop")
                return 0
            if args.json:
                shown = [{k: v for k, v in d.items() if k != "name"} for d in devices]
                print(json.dumps([{**d, "created_at": iso(d["created_at"])} for d in shown], indent=2))
            elif not devices:
                print(f"{args.name} has no device with push on: it is turned on in the inbox (Devices)")
            for d in devices if not args.json else []:
                label = one_line(d["label"] or "a browser")
                print(f"{d['id']:<16} {label:<20} via {d['service']:<28} since {iso(d['created_at'])}")
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
